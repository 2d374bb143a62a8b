/**
 * The primitives beyond the mutex against scripted in-process gateways: the frames of
 * mode/permits/lockDelayMs, acquireAll and watch exactly as
 * docs/protocol.md and gateway/primitives_test.go show them; features from
 * Lockgate-Features and unsupported refused before sending; the new error
 * codes as typed errors; the lease cache keeping only plain leases; and
 * election.observe re-watching without repeating a leader.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { type WebSocket } from "ws";
import {
  Client,
  DelayedError,
  LockgateError,
  PermitsMismatchError,
  UnsupportedError,
  WatchOverflowError,
  election,
  type WatchEvent,
} from "../src/index.js";
import { fakeGateway, type FakeGateway, type Msg } from "./gateway.js";

const All = "wanted,shared,semaphore,multikey,watch,lockdelay";

/** fake is a gateway on a free loopback port announcing features (none when ""); onMsg answers each request. */
const fake = (features: string, onMsg: (m: Msg, reply: (r: Msg) => void, ws: WebSocket, conn: number) => void): Promise<FakeGateway> =>
  fakeGateway(onMsg, { features });

const tok = (key: string, value: number) => ({ key, value });

/** A gateway that grants acquires (echoing mode and permits) and acknowledges releases. */
function granting(m: Msg, reply: (r: Msg) => void): void {
  switch (m.commandType) {
    case 1:
    case 5:
      reply({ type: "grant", key: m.key, fencingToken: tok(m.key, 7), lockToken: m.lockToken, ttl: m.ttl, owner: m.clientId, mode: m.mode, permits: m.permits });
      break;
    case 7:
    case 8:
      reply({
        type: "grants",
        leases: m.keys.map((k: string, i: number) => ({ key: k, fencingToken: tok(k, 10 + i), lockToken: m.lockToken, ttl: m.ttl, owner: m.clientId, mode: m.mode, permits: m.permits })),
      });
      break;
    case 2:
      reply({ type: "released", key: m.key });
      break;
    case 3:
      reply({ type: "renewed", key: m.key, fencingToken: m.fencingToken, ttl: m.ttl });
      break;
  }
}

const until = async (cond: () => boolean) => {
  for (let i = 0; !cond(); i++) {
    if (i > 1000) throw new Error("condition never held");
    await new Promise((r) => setTimeout(r, 5));
  }
};

test("features come from Lockgate-Features; a call needing one not announced fails unsupported before anything is sent", async () => {
  const f = await fake("wanted,shared", granting);
  try {
    const c = new Client([f.addr]);
    assert.deepEqual(await c.features(), ["wanted", "shared"]);
    const cases: Array<[string, () => Promise<unknown>]> = [
      ["semaphore", () => c.tryAcquire("k", { ttlMs: 1000, permits: 2 })],
      ["semaphore", () => c.acquire("k", { ttlMs: 1000, mode: "shared", permits: 2 })],
      ["lockdelay", () => c.acquire("k", { ttlMs: 1000, lockDelayMs: 100 })],
      ["multikey", () => c.tryAcquireAll(["a", "b"], { ttlMs: 1000 })],
      ["multikey", () => c.acquireAll(["a"], { ttlMs: 1000, mode: "shared" })],
      ["watch", () => c.watch("k")],
    ];
    for (const [feature, call] of cases) {
      await assert.rejects(call(), (e: unknown) => e instanceof UnsupportedError && e.code === "unsupported" && e.feature === feature, feature);
    }
    assert.equal(f.got.length, 0, "nothing reached the gateway");
    // Announced: a shared acquire goes out as the protocol says.
    const l = await c.tryAcquire("k", { ttlMs: 1000, mode: "shared" });
    assert.equal(l.mode, "shared");
    assert.equal(f.got.length, 1);
    await c.close();
  } finally {
    await f.close();
  }
});

test("acquire frames: mode, permits (a semaphore permit is shared) and lockDelayMs; absent for a plain acquire", async () => {
  const f = await fake(All, granting);
  try {
    const c = new Client([f.addr], { clientId: "me" });
    const plain = await c.tryAcquire("p", { ttlMs: 1000 });
    const shared = await c.acquire("s", { ttlMs: 1000, mode: "shared" });
    const sem = await c.tryAcquire("m", { ttlMs: 1000, permits: 3 });
    const delayed = await c.acquire("d", { ttlMs: 1000, lockDelayMs: 250, mode: "exclusive" });
    const strip = (m: Msg) => {
      const { id: _id, lockToken: _t, conn: _c, ...rest } = m;
      return rest;
    };
    assert.deepEqual(f.got.map(strip), [
      { commandType: 5, key: "p", clientId: "me", ttl: 1000 },
      { commandType: 1, key: "s", clientId: "me", ttl: 1000, mode: "shared" },
      { commandType: 5, key: "m", clientId: "me", ttl: 1000, mode: "shared", permits: 3 },
      { commandType: 1, key: "d", clientId: "me", ttl: 1000, lockDelayMs: 250 },
    ]);
    assert.deepEqual([plain.mode, plain.permits], ["exclusive", 0]);
    assert.deepEqual([shared.mode, shared.permits], ["shared", 0]);
    assert.deepEqual([sem.mode, sem.permits], ["shared", 3]);
    assert.equal(delayed.mode, "exclusive");
    for (const [opts, code] of [
      [{ mode: "read" }, "invalid_mode"],
      [{ permits: -1 }, "invalid_permits"],
      [{ permits: 65537 }, "invalid_permits"],
      [{ lockDelayMs: 60_001 }, "invalid_lock_delay"],
    ] as const) {
      await assert.rejects(c.tryAcquire("x", { ttlMs: 1000, ...(opts as object) }), (e: LockgateError) => e.code === code, code);
    }
    await c.close();
  } finally {
    await f.close();
  }
});

test("acquireAll: one frame with keys (no key), one lease per key in order; bad key lists refused locally", async () => {
  const f = await fake(All, granting);
  try {
    const c = new Client([f.addr], { clientId: "me" });
    const ls = await c.acquireAll(["m/b", "m/a"], { ttlMs: 2000, mode: "shared", waitMs: 500 });
    const sent = f.got[0]!;
    assert.equal(sent.commandType, 7);
    assert.deepEqual(sent.keys, ["m/b", "m/a"]);
    assert.equal(sent.key, undefined);
    assert.equal(sent.mode, "shared");
    assert.equal(sent.waitMs, 500);
    assert.deepEqual(ls.map((l) => [l.key, l.fencingToken, l.mode]), [["m/b", 10n, "shared"], ["m/a", 11n, "shared"]]);
    const t = await c.tryAcquireAll(["x"], { ttlMs: 2000 });
    assert.equal(f.got[1]!.commandType, 8);
    assert.equal(t[0]!.key, "x");
    // Both leases share the lock token (as raftlock's do): each releases its own key.
    await ls[1]!.release();
    assert.equal(ls[0]!.reason, undefined);
    await ls[0]!.release();
    assert.deepEqual(f.got.filter((m) => m.commandType === 2).map((m) => m.key), ["m/a", "m/b"]);
    for (const keys of [[], ["a", "a"], Array.from({ length: 65 }, (_, i) => `k${i}`)]) {
      await assert.rejects(c.tryAcquireAll(keys, { ttlMs: 1000 }), (e: LockgateError) => e.code === "invalid_keys", JSON.stringify(keys));
    }
    await assert.rejects(c.tryAcquireAll(["a", ""], { ttlMs: 1000 }), (e: LockgateError) => e.code === "invalid_key");
    await c.close();
  } finally {
    await f.close();
  }
});

test("a grants reply that does not match the keys is given back whole", async () => {
  const f = await fake(All, (m, reply) => {
    if (m.commandType === 8) {
      reply({ type: "grants", leases: [
        { key: m.keys[0], fencingToken: tok(m.keys[0], 3), lockToken: m.lockToken, ttl: m.ttl },
        { key: "other", fencingToken: tok("other", 4), lockToken: m.lockToken, ttl: m.ttl },
      ] });
    } else granting(m, reply);
  });
  try {
    const c = new Client([f.addr]);
    await assert.rejects(c.tryAcquireAll(["a", "b"], { ttlMs: 1000 }), (e: LockgateError) => e.code === "unavailable");
    await until(() => f.got.filter((m) => m.commandType === 2).length === 2);
    assert.deepEqual(f.got.filter((m) => m.commandType === 2).map((m) => [m.key, m.fencingToken.value]), [["a", 3], ["other", 4]]);
    await c.close();
  } finally {
    await f.close();
  }
});

test("the new error codes are typed errors: delayed with retryInMs, permits_mismatch, unsupported naming the feature", async () => {
  const answers: Msg[] = [
    { code: "delayed", message: "in its lock-delay", retryIn: 1234 },
    { code: "permits_mismatch", message: "the key has 2" },
    { code: "unsupported", message: "no", feature: "semaphore" },
    { code: "invalid_keys", message: "twice" },
  ];
  let i = 0;
  const f = await fake(All, (m, reply) => reply({ type: "error", error: answers[i++] }));
  try {
    const c = new Client([f.addr]);
    await assert.rejects(c.tryAcquire("k", { ttlMs: 1000 }), (e: unknown) => e instanceof DelayedError && e.retryInMs === 1234);
    await assert.rejects(c.tryAcquire("k", { ttlMs: 1000, permits: 3 }), (e: unknown) => e instanceof PermitsMismatchError && e.code === "permits_mismatch");
    await assert.rejects(c.tryAcquire("k", { ttlMs: 1000, permits: 3 }), (e: unknown) => e instanceof UnsupportedError && e.feature === "semaphore");
    await assert.rejects(c.tryAcquireAll(["a"], { ttlMs: 1000 }), (e: unknown) => e instanceof LockgateError && e.code === "invalid_keys");
    await c.close();
  } finally {
    await f.close();
  }
});

test("watch: events in order with their fields; aborting sends unwatch naming the watch", async () => {
  const f = await fake(All, (m, reply) => {
    if (m.commandType !== 9) return;
    const ev = (e: Msg) => reply({ type: "event", key: m.key, ...e });
    ev({ event: "holder", owner: "a", fencingToken: tok(m.key, 5), value: "v1", revision: 10 });
    ev({ event: "synced", revision: 10 });
    ev({ event: "released", owner: "a", fencingToken: tok(m.key, 5), revision: 11 });
    ev({ event: "granted", owner: "b", fencingToken: tok(m.key, 6), mode: "shared", permits: 2, revision: 12 });
    ev({ event: "expired", owner: "b", fencingToken: tok(m.key, 6), mode: "shared", permits: 2, revision: 13 });
  });
  try {
    const c = new Client([f.addr]);
    const ctl = new AbortController();
    const w = await c.watch("wk", { signal: ctl.signal });
    const got: WatchEvent[] = [];
    for await (const ev of w) {
      got.push(ev);
      if (got.length === 5) ctl.abort();
    }
    assert.deepEqual(
      got.map((e) => [e.type, e.owner, e.fencingToken, e.value, e.mode, e.permits, e.revision]),
      [
        ["holder", "a", 5n, "v1", "exclusive", 0, 10],
        ["synced", "", undefined, undefined, "exclusive", 0, 10],
        ["released", "a", 5n, undefined, "exclusive", 0, 11],
        ["granted", "b", 6n, undefined, "shared", 2, 12],
        ["expired", "b", 6n, undefined, "shared", 2, 13],
      ],
    );
    const watch = f.got.find((m) => m.commandType === 9)!;
    assert.equal(watch.key, "wk");
    await until(() => f.got.some((m) => m.commandType === 10));
    assert.equal(f.got.find((m) => m.commandType === 10)!.target, watch.id);
    await c.close();
  } finally {
    await f.close();
  }
});

test("a watch ends with WatchOverflowError on watch_overflow, and with unavailable when its connection is lost", async () => {
  const f = await fake(All, (m, reply, ws) => {
    if (m.commandType !== 9) return;
    reply({ type: "event", key: m.key, event: "synced" });
    if (m.key === "over") reply({ type: "event", key: m.key, event: "error", error: { code: "watch_overflow", message: "fell behind" } });
    else setTimeout(() => ws.terminate(), 20);
  });
  try {
    const c = new Client([f.addr]);
    const over = await c.watch("over");
    assert.equal((await over.next())?.type, "synced");
    await assert.rejects(over.next(), (e: unknown) => e instanceof WatchOverflowError && e.code === "watch_overflow");
    const lost = await c.watch("lost");
    assert.equal((await lost.next())?.type, "synced");
    await assert.rejects(lost.next(), (e: unknown) => e instanceof LockgateError && e.code === "unavailable");
    // An error answer to the watch itself fails watch().
    await c.close();
  } finally {
    await f.close();
  }
});

test("a watch the caller does not read ends with WatchOverflowError after the client's buffer, and unwatches", async () => {
  const f = await fake(All, (m, reply) => {
    if (m.commandType !== 9) return;
    for (let i = 0; i < 1100; i++) reply({ type: "event", key: m.key, event: "granted", fencingToken: tok(m.key, i + 1), revision: i + 1 });
  });
  try {
    const c = new Client([f.addr]);
    const w = await c.watch("busy");
    await until(() => f.got.some((m) => m.commandType === 10));
    await assert.rejects(w.next(), (e: unknown) => e instanceof WatchOverflowError);
    await c.close();
  } finally {
    await f.close();
  }
});

test("the lease cache keeps only plain exclusive leases: shared, semaphore and lock-delay leases release for real", async () => {
  const f = await fake(All, granting);
  try {
    const c = new Client([f.addr], { cacheLeases: true });
    const plain = await c.acquire("k", { ttlMs: 5000 });
    await plain.release();
    assert.equal(c.cacheStats().kept, 1);
    assert.equal(f.got.filter((m) => m.commandType === 2).length, 0);
    // A shared acquire of the key gives the kept lease up first.
    const shared = await c.acquire("k", { ttlMs: 5000, mode: "shared" });
    const releases = () => f.got.filter((m) => m.commandType === 2);
    assert.equal(releases().length, 1);
    assert.equal(releases()[0]!.lockToken, plain.lockToken);
    await shared.release();
    for (const opts of [{ permits: 2 }, { lockDelayMs: 100 }]) {
      const l = await c.acquire("j", { ttlMs: 5000, ...opts });
      await l.release();
      assert.equal(l.reason, "released");
    }
    const ls = await c.acquireAll(["x", "y"], { ttlMs: 5000 });
    for (const l of ls) await l.release();
    assert.equal(releases().length, 6);
    assert.equal(c.cacheStats().kept, 1);
    await c.close();
  } finally {
    await f.close();
  }
});

test("election.observe: the leader after sync, none on release, then the next; after a broken watch it re-watches without repeating a leader", async () => {
  let watches = 0;
  const f = await fake(All, (m, reply, ws) => {
    if (m.commandType === 4) {
      reply({ type: "error", error: { code: "not_found", message: "nobody" } });
      return;
    }
    if (m.commandType !== 9) return;
    const ev = (e: Msg) => reply({ type: "event", key: m.key, ...e });
    if (++watches === 1) {
      ev({ event: "holder", owner: "a", value: "A", fencingToken: tok(m.key, 5), revision: 1 });
      ev({ event: "synced", revision: 1 });
      ev({ event: "released", owner: "a", fencingToken: tok(m.key, 5), revision: 2 });
      ev({ event: "granted", owner: "b", value: "B", fencingToken: tok(m.key, 6), revision: 3 });
      setTimeout(() => ws.terminate(), 20);
    } else {
      // The re-watch finds b still leading: not reported again.
      ev({ event: "holder", owner: "b", value: "B", fencingToken: tok(m.key, 6), revision: 3 });
      ev({ event: "synced", revision: 3 });
      ev({ event: "expired", owner: "b", fencingToken: tok(m.key, 6), revision: 4 });
      ev({ event: "granted", owner: "c", value: "C", fencingToken: tok(m.key, 8), revision: 5 });
    }
  });
  try {
    const c = new Client([f.addr]);
    assert.equal((await election.current(c, "e")).present, false);
    const ctl = new AbortController();
    const seen: string[] = [];
    for await (const ld of election.observe(c, "e", { signal: ctl.signal })) {
      seen.push(ld.present ? `${ld.value}/${ld.fencingToken}` : "none");
      if (seen.length === 5) ctl.abort();
    }
    assert.deepEqual(seen, ["A/5", "none", "B/6", "none", "C/8"]);
    assert.equal(watches, 2);
    await c.close();
  } finally {
    await f.close();
  }
});

test("features() without a reachable gateway fails unavailable within requestTimeoutMs", async () => {
  const c = new Client(["127.0.0.1:1"], { requestTimeoutMs: 300, dialTimeoutMs: 100 });
  await assert.rejects(c.features(), (e: unknown) => e instanceof LockgateError && e.code === "unavailable");
  await c.close();
});

test("an aborted acquireAll sends cancel (6) naming it; a grants reply that raced the cancel is released whole", async () => {
  const f = await fake(All, (m, reply, ws) => {
    if (m.commandType === 7) return; // queued
    if (m.commandType === 6) {
      const target = f.got.find((x) => x.id === m.target)!;
      ws.send(JSON.stringify({ id: m.target, type: "grants", success: true, leases: target.keys.map((k: string, i: number) => ({ key: k, fencingToken: tok(k, 20 + i), lockToken: target.lockToken, ttl: target.ttl })) }));
      return;
    }
    granting(m, reply);
  });
  try {
    const c = new Client([f.addr]);
    const ctl = new AbortController();
    const p = c.acquireAll(["a", "b"], { ttlMs: 5000, signal: ctl.signal });
    await until(() => f.got.some((m) => m.commandType === 7));
    ctl.abort();
    await assert.rejects(p, (e: LockgateError) => e.code === "cancelled");
    const acquire = f.got.find((m) => m.commandType === 7)!;
    assert.equal(f.got.find((m) => m.commandType === 6)?.target, acquire.id);
    await until(() => f.got.filter((m) => m.commandType === 2).length === 2);
    assert.deepEqual(f.got.filter((m) => m.commandType === 2).map((m) => [m.key, m.lockToken, m.fencingToken.value]), [["a", acquire.lockToken, 20], ["b", acquire.lockToken, 21]]);
    await c.close();
  } finally {
    await f.close();
  }
});
