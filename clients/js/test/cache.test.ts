/**
 * The lease cache (ClientOptions.cacheLeases) against scripted in-process
 * gateways: a hit sends nothing, a wanted push reclaims an unused lease
 * but not one in use, the idle time, a refused renewal, a gateway that does
 * not announce wanted, and close().
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { type WebSocket } from "ws";
import { Client, NotHeldError, type Lease } from "../src/index.js";
import { listenLoopback, wsServer, type Msg } from "./gateway.js";


interface Fake {
  addr: string;
  /** Every request received, in order. */
  got: Msg[];
  /** Resolves with the next request of commandType cmd (one already received counts if it is the first unclaimed one). */
  next(cmd: number): Promise<Msg>;
  /** Sends a wanted push for m's grant on every connection. */
  push(m: Msg): void;
  close(): Promise<void>;
}

/**
 * fake starts a gateway on a free loopback port that grants every acquire
 * (tokens 1, 2, …), acks releases, and answers renewals with renew(m);
 * wanted says whether its upgrade announces `Lockgate-Features: wanted`.
 */
async function fake(opts: { wanted?: boolean; renew?: (m: Msg) => Msg } = {}): Promise<Fake> {
  const http: Server = createServer();
  const wss = wsServer({ features: opts.wanted !== false ? "wanted" : "" });
  const waiting: Array<{ cmd: number; resolve: (m: Msg) => void }> = [];
  const claimed = new Set<Msg>();
  const socks = new Set<WebSocket>();
  let token = 0;
  const f: Fake = {
    addr: "",
    got: [],
    next: (cmd) =>
      new Promise((resolve, reject) => {
        // Bounded, so that a request that never comes fails the test instead of hanging it.
        const t = setTimeout(() => reject(new Error(`no request of command ${cmd} within 5 s`)), 5_000);
        const res = (m: Msg) => (clearTimeout(t), resolve(m));
        const m = f.got.find((x) => x.commandType === cmd && !claimed.has(x));
        if (m) {
          claimed.add(m);
          res(m);
        } else waiting.push({ cmd, resolve: res });
      }),
    push: (m) => {
      for (const ws of socks) ws.send(JSON.stringify({ type: "wanted", success: true, key: m.key, fencingToken: { key: m.key, value: m.token }, lockToken: m.lockToken }));
    },
    close: async () => {},
  };
  const grants = new Map<string, number>(); // lockToken → fencing token
  http.on("upgrade", (req, socket, head) => {
    wss.handleUpgrade(req, socket, head, (ws) => {
      socks.add(ws);
      ws.on("close", () => socks.delete(ws));
      ws.on("message", (data) => {
        const m = JSON.parse(data.toString()) as Msg;
        f.got.push(m);
        const i = waiting.findIndex((w) => w.cmd === m.commandType);
        if (i >= 0) {
          claimed.add(m);
          waiting.splice(i, 1)[0]!.resolve(m);
        }
        const reply = (r: Msg) => ws.send(JSON.stringify({ id: m.id, success: r.type !== "error", ...r }));
        switch (m.commandType) {
          case 1:
          case 5: {
            const t = grants.get(m.lockToken) ?? ++token;
            grants.set(m.lockToken, t);
            m.token = t;
            reply({ type: "grant", key: m.key, fencingToken: { key: m.key, value: t }, lockToken: m.lockToken, ttl: m.ttl, owner: m.clientId, ...(m.key.startsWith("wanted/") ? { wanted: true } : {}) });
            break;
          }
          case 2:
            reply({ type: "released", key: m.key });
            break;
          case 3:
            reply(opts.renew?.(m) ?? { type: "renewed", key: m.key, fencingToken: m.fencingToken, ttl: m.ttl });
            break;
          case 4:
            reply({ type: "error", error: { code: "not_found", message: "nobody holds it" } });
            break;
        }
      });
    });
  });
  ({ addr: f.addr, close: f.close } = await listenLoopback(http, wss));
  return f;
}

const count = (f: Fake, cmd: number) => f.got.filter((m) => m.commandType === cmd).length;
const acquireOf = (f: Fake, l: Lease) => f.got.find((m) => m.commandType === 1 || m.commandType === 5 ? m.lockToken === l.lockToken : false)!;

/** roundTrip sends one inspect and awaits its answer: every request the client sent before it has reached the fake. */
const roundTrip = (c: Client) => c.inspect("sync");

test("a cached lease is handed out again: the same Lease and token, no request; its second release is not_held", async () => {
  const f = await fake();
  try {
    const c = new Client([f.addr], { cacheLeases: true });
    const l1 = await c.acquire("k", { ttlMs: 5000 });
    await l1.release();
    assert.equal(l1.reason, undefined, "a kept lease has not ended");
    await assert.rejects(l1.release(), NotHeldError);
    const before = f.got.length;
    const l2 = await c.acquire("k", { ttlMs: 5000 });
    const l3p = l2.release().then(() => c.tryAcquire("k", { ttlMs: 5000 }));
    const l3 = await l3p;
    assert.equal(l2, l1);
    assert.equal(l3, l1);
    assert.equal(l2.fencingToken, 1n);
    await roundTrip(c);
    assert.deepEqual(f.got.slice(before).map((m) => m.commandType), [4], "nothing but the inspect went out");
    assert.equal(count(f, 2), 0);
    assert.deepEqual(c.cacheStats(), { hits: 2, misses: 1, kept: 2, reclaimed: 0, idle: 0, unused: 0 });
    // Other options: the kept lease is released for real before the acquire goes out.
    await l3.release();
    const l4 = await c.acquire("k", { ttlMs: 6000 });
    assert.notEqual(l4, l1);
    assert.equal(await l1.lost, "released");
    const [rel, acq] = f.got.filter((m) => m.commandType === 2 || m.commandType === 1).slice(-2);
    assert.equal(rel?.commandType, 2);
    assert.equal(rel?.lockToken, l1.lockToken);
    assert.equal(acq?.lockToken, l4.lockToken);
    await c.close();
  } finally {
    await f.close();
  }
});

test("a wanted push releases an unused cached lease for real at once", async () => {
  const f = await fake();
  try {
    const c = new Client([f.addr], { cacheLeases: true });
    const l = await c.acquire("k", { ttlMs: 5000 });
    await l.release();
    assert.equal(c.cacheStats().unused, 1);
    const rel = f.next(2);
    f.push(acquireOf(f, l));
    assert.equal((await rel).lockToken, l.lockToken);
    assert.equal(await l.lost, "released");
    assert.deepEqual(c.cacheStats(), { hits: 0, misses: 1, kept: 1, reclaimed: 1, idle: 0, unused: 0 });
    // Never handed out again.
    const l2 = await c.acquire("k", { ttlMs: 5000 });
    assert.notEqual(l2, l);
    assert.equal(count(f, 1), 2);
    await c.close();
  } finally {
    await f.close();
  }
});

test("a lease in use is not released on a wanted push; its release then releases for real, as does a grant that came wanted", async () => {
  const f = await fake();
  try {
    const c = new Client([f.addr], { cacheLeases: true });
    const l = await c.acquire("k", { ttlMs: 5000 });
    f.push(acquireOf(f, l));
    await l.wanted;
    await new Promise((r) => setImmediate(r));
    await roundTrip(c);
    assert.equal(count(f, 2), 0, "the cache released a lease in use");
    assert.equal(l.reason, undefined);
    await l.release();
    assert.equal(count(f, 2), 1);
    assert.equal(l.reason, "released");

    const w = await c.acquire("wanted/k", { ttlMs: 5000 }); // the grant says wanted: true
    assert.ok(w.isWanted);
    await w.release();
    assert.equal(count(f, 2), 2);
    assert.equal(w.reason, "released");
    assert.deepEqual(c.cacheStats(), { hits: 0, misses: 2, kept: 0, reclaimed: 0, idle: 0, unused: 0 });
    await c.close();
  } finally {
    await f.close();
  }
});

test("an unused lease is released for real after cacheIdleMs; a lease without auto-renew is renewed by the cache meanwhile", async () => {
  const f = await fake();
  try {
    const c = new Client([f.addr], { cacheLeases: true, cacheIdleMs: 400 });
    const l = await c.acquire("k", { ttlMs: 300 }); // no auto-renew: the cache renews at ttl/3
    const kept = performance.now();
    await l.release();
    const rel = await f.next(2);
    const took = performance.now() - kept;
    assert.equal(rel.lockToken, l.lockToken);
    assert.ok(took >= 390, `released after ${Math.round(took)} ms, before cacheIdleMs`);
    const renews = f.got.filter((m) => m.commandType === 3);
    assert.ok(renews.length >= 3, `${renews.length} renewals in ${Math.round(took)} ms of a 300 ms lease`);
    assert.ok(renews.every((m) => m.lockToken === l.lockToken));
    assert.equal(await l.lost, "released");
    assert.deepEqual(c.cacheStats(), { hits: 0, misses: 1, kept: 1, reclaimed: 0, idle: 1, unused: 0 });
    await c.close();
  } finally {
    await f.close();
  }
});

test("a cached lease whose renewal is refused ends and leaves the cache", async () => {
  const f = await fake({ renew: () => ({ type: "error", error: { code: "not_held", message: "expired" } }) });
  try {
    const c = new Client([f.addr], { cacheLeases: true });
    const l = await c.acquire("k", { ttlMs: 300 });
    await l.release();
    assert.equal(await l.lost, "not_held");
    assert.equal(c.cacheStats().unused, 0);
    const l2 = await c.acquire("k", { ttlMs: 300 });
    assert.notEqual(l2, l);
    assert.equal(count(f, 1), 2);
    assert.equal(count(f, 2), 0, "an ended lease is not released");
    assert.equal(c.cacheStats().hits, 0);
    await c.close();
  } finally {
    await f.close();
  }
});

test("no lease is kept behind a gateway that does not announce wanted pushes", async () => {
  const f = await fake({ wanted: false });
  try {
    const c = new Client([f.addr], { cacheLeases: true });
    const l = await c.acquire("k", { ttlMs: 5000 });
    assert.equal(c.signalsWanted, false);
    await l.release();
    assert.equal(count(f, 2), 1);
    assert.equal(l.reason, "released");
    const l2 = await c.acquire("k", { ttlMs: 5000 });
    assert.notEqual(l2, l);
    assert.deepEqual(c.cacheStats(), { hits: 0, misses: 2, kept: 0, reclaimed: 0, idle: 0, unused: 0 });
    await c.close();
  } finally {
    await f.close();
  }
});

test("a lease released on disconnect is never kept, and asking for one releases a kept lease of its key first", async () => {
  const f = await fake();
  try {
    const c = new Client([f.addr], { cacheLeases: true });
    const l = await c.acquire("k", { ttlMs: 5000, releaseOnDisconnect: true });
    await l.release();
    assert.equal(l.reason, "released");
    const kept = await c.acquire("k", { ttlMs: 5000 });
    await kept.release();
    assert.equal(kept.reason, undefined);
    const l2 = await c.acquire("k", { ttlMs: 5000, releaseOnDisconnect: true });
    assert.notEqual(l2, kept);
    assert.equal(await kept.lost, "released");
    assert.deepEqual(f.got.filter((m) => m.commandType <= 2).map((m) => m.commandType), [1, 2, 1, 2, 1]);
    assert.deepEqual(c.cacheStats(), { hits: 0, misses: 3, kept: 1, reclaimed: 0, idle: 0, unused: 0 });
    await c.close();
  } finally {
    await f.close();
  }
});

test("close() releases every kept lease for real, and leaves one in use alone", async () => {
  const f = await fake();
  try {
    const c = new Client([f.addr], { cacheLeases: true });
    const a = await c.acquire("a", { ttlMs: 5000 });
    const b = await c.acquire("b", { ttlMs: 5000, autoRenew: true });
    const inUse = await c.acquire("c", { ttlMs: 5000 });
    await a.release();
    await b.release();
    assert.equal(c.cacheStats().unused, 2);
    await c.close();
    assert.equal(await a.lost, "released");
    assert.equal(await b.lost, "released");
    assert.deepEqual(new Set(f.got.filter((m) => m.commandType === 2).map((m) => m.key)), new Set(["a", "b"]));
    assert.equal(inUse.reason, undefined);
    assert.equal(c.cacheStats().unused, 0);
  } finally {
    await f.close();
  }
});

test("off by default: release releases", async () => {
  const f = await fake();
  try {
    const c = new Client([f.addr]);
    const l = await c.acquire("k", { ttlMs: 5000 });
    await l.release();
    assert.equal(count(f, 2), 1);
    assert.deepEqual(c.cacheStats(), { hits: 0, misses: 0, kept: 0, reclaimed: 0, idle: 0, unused: 0 });
    await c.close();
  } finally {
    await f.close();
  }
});
