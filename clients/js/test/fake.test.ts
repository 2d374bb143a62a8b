/**
 * The client against scripted in-process gateways (ws's server): handshake
 * redirects, a server that selects no subprotocol, re-sends after a drop
 * with the same lockToken, the retry policy's answers, cancel and a grant
 * that races it, wanted pushes, and the bearer token's two carriers.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { CancelledError, Client, LockgateError } from "../src/index.js";
import { fakeGateway, type Msg } from "./gateway.js";

const fake = fakeGateway;

const grantOf = (m: Msg, token = 7) => ({ type: "grant", key: m.key, fencingToken: { key: m.key, value: token }, lockToken: m.lockToken, ttl: m.ttl, owner: m.clientId });

/** A gateway that grants every acquire and acks every release and renew. */
function simple(m: Msg, reply: (r: Msg) => void): void {
  switch (m.commandType) {
    case 1:
    case 5:
      reply(grantOf(m));
      break;
    case 2:
      reply({ type: "released", key: m.key });
      break;
    case 3:
      reply({ type: "renewed", key: m.key, fencingToken: m.fencingToken, ttl: m.ttl });
      break;
    case 4:
      reply({ type: "error", error: { code: "not_found", message: "nobody holds it" } });
      break;
  }
}

test("a 421 handshake naming the leader, and a 307 Location, redirect the client", async () => {
  const leader = await fake(simple);
  const f421 = await fake(simple, { refuse: () => ({ status: 421, body: JSON.stringify({ error: { code: "not_leader", leader: { id: "2", addr: leader.addr } } }) }) });
  const f307 = await fake(simple, { refuse: () => ({ status: 307, headers: { Location: `http://${leader.addr}/v1/ws` } }) });
  try {
    for (const f of [f421, f307]) {
      const c = new Client([f.addr]);
      const l = await c.acquire("k", { ttlMs: 1000 });
      assert.equal(c.endpoint, leader.addr);
      await l.release();
      await c.close();
    }
    assert.equal(f421.upgrades.length, 1);
    assert.equal(f307.upgrades.length, 1);
  } finally {
    await Promise.all([leader.close(), f421.close(), f307.close()]);
  }
});

test("the subprotocol offer and the bearer token; a server that selects no subprotocol is accepted", async () => {
  const old = await fake(simple, { protocol: false });
  try {
    const c = new Client([old.addr], { token: "s3cret" });
    const l = await c.tryAcquire("k", { ttlMs: 1000 });
    await l.release();
    await c.close();
    const offers = old.upgrades.map((r) => r.headers["sec-websocket-protocol"] ?? "");
    assert.equal(offers[0], "lockgate.v1,lockgate.bearer.czNjcmV0"); // refused by ws for the missing answer …
    assert.equal(offers.at(-1), ""); // … so the client asked again without the offer
    for (const r of old.upgrades) assert.equal(r.headers.authorization, "Bearer s3cret");
  } finally {
    await old.close();
  }
});

test("a connection that drops re-sends the waiting acquire with the same lockToken", async () => {
  const f = await fake((m, reply, ws, conn) => {
    if (m.commandType === 1 && conn === 1) {
      ws.terminate(); // the first copy is lost with its connection
      return;
    }
    simple(m, reply);
  });
  try {
    const c = new Client([f.addr]);
    const l = await c.acquire("k", { ttlMs: 5000 });
    const acquires = f.got.filter((m) => m.commandType === 1);
    assert.equal(acquires.length, 2);
    assert.notEqual(acquires[0]!.conn, acquires[1]!.conn);
    assert.equal(acquires[0]!.lockToken, acquires[1]!.lockToken);
    assert.match(acquires[0]!.lockToken, /^[0-9a-f]{32}$/);
    assert.equal(l.lockToken, acquires[0]!.lockToken);
    assert.equal(l.fencingToken, 7n);
    // The deadline counts from the first copy's send.
    await l.release();
    await c.close();
  } finally {
    await f.close();
  }
});

test("not_leader without a leader and unavailable are retried with backoff; not_leader with one moves the connection", async () => {
  const leader = await fake(simple);
  let n = 0;
  const follower = await fake((m, reply) => {
    n++;
    if (n === 1) reply({ type: "error", error: { code: "not_leader", message: "no leader yet", leader: {} } });
    else if (n === 2) reply({ type: "error", error: { code: "unavailable", message: "no quorum" } });
    else reply({ type: "error", error: { code: "not_leader", message: "there", leader: { id: "1", addr: leader.addr } } });
  });
  try {
    const c = new Client([follower.addr]);
    const l = await c.tryAcquire("k", { ttlMs: 1000 });
    assert.equal(n, 3);
    assert.equal(c.endpoint, leader.addr);
    assert.equal(leader.got.length, 1);
    await l.release();
    await c.close();
  } finally {
    await Promise.all([leader.close(), follower.close()]);
  }
});

// A node cut off from its peers (an ex-leader that stepped down) answers
// not_leader naming no leader for as long as it stays cut off. The real
// servers of these tests come only from the Go harness, which cannot cut a
// node off, so a scripted gateway plays that node: what is tested is the
// client's choice of endpoint, not the server.
test("a client moves off an endpoint that keeps answering not_leader without a leader", async () => {
  const leaderless = await fake((m, reply) => reply({ type: "error", error: { code: "not_leader", message: "no leader known", leader: {} } }));
  // The working gateway refuses upgrades until the client has reached the
  // leaderless one, so the request is sent there first whichever endpoint
  // the client picks first.
  const good = await fake(simple, { refuse: () => (leaderless.upgrades.length === 0 ? { status: 503 } : undefined) });
  try {
    const c = new Client([leaderless.addr, good.addr], { requestTimeoutMs: 20_000 });
    const start = performance.now();
    // Bound: three answers backed off from 50 ms (at most 350 ms), a
    // reconnect and a round trip, with room for a busy machine.
    const l = await c.tryAcquire("k", { ttlMs: 1000, signal: AbortSignal.timeout(8_000) });
    assert.ok(performance.now() - start < 8_000);
    assert.ok(leaderless.got.length >= 1, "the request never reached the leaderless endpoint: the test proved nothing");
    assert.equal(c.endpoint, good.addr);
    await l.release();
    await c.close();
  } finally {
    await Promise.all([leaderless.close(), good.close()]);
  }
});

test("an aborted acquire sends cancel (6) naming it; a grant that raced the cancel is released", async () => {
  for (const race of [false, true]) {
    const f = await fake((m, reply, ws) => {
      if (m.commandType === 1) return; // queued: no answer until cancelled
      if (m.commandType === 6) {
        const target = f.got.find((x) => x.id === m.target)!;
        if (race) {
          ws.send(JSON.stringify({ id: m.target, success: true, ...grantOf(target, 9) }));
        } else {
          reply({ type: "cancelled", key: target.key });
          ws.send(JSON.stringify({ id: m.target, type: "error", success: false, error: { code: "cancelled", message: "cancelled" } }));
        }
        return;
      }
      simple(m, reply);
    });
    try {
      const c = new Client([f.addr]);
      const ctl = new AbortController();
      const p = c.acquire("k", { ttlMs: 5000, signal: ctl.signal });
      while (!f.got.some((m) => m.commandType === 1)) await new Promise((r) => setTimeout(r, 5));
      ctl.abort(new Error("caller gave up"));
      await assert.rejects(p, (e: LockgateError) => e instanceof CancelledError && e.code === "cancelled");
      const acquire = f.got.find((m) => m.commandType === 1)!;
      const cancel = f.got.find((m) => m.commandType === 6);
      assert.equal(cancel?.target, acquire.id);
      const release = f.got.find((m) => m.commandType === 2);
      if (race) {
        assert.equal(release?.lockToken, acquire.lockToken);
        assert.deepEqual(release?.fencingToken, { key: "k", value: 9 });
      } else {
        assert.equal(release, undefined);
      }
      await c.close();
    } finally {
      await f.close();
    }
  }
});

test("a wanted push resolves lease.wanted", async () => {
  const f = await fake((m, reply, ws) => {
    simple(m, reply);
    if (m.commandType === 1) ws.send(JSON.stringify({ type: "wanted", success: true, key: m.key, fencingToken: { key: m.key, value: 7 }, lockToken: m.lockToken }));
  });
  try {
    const c = new Client([f.addr]);
    const l = await c.acquire("k", { ttlMs: 5000 });
    await l.wanted;
    assert.ok(l.isWanted);
    await l.release();
    await c.close();
  } finally {
    await f.close();
  }
});

test("a renew answered not_held ends the lease: lost resolves not_held and signal aborts", async () => {
  const f = await fake((m, reply) => {
    if (m.commandType === 3) reply({ type: "error", error: { code: "not_held", message: "expired" } });
    else simple(m, reply);
  });
  try {
    const c = new Client([f.addr]);
    const l = await c.acquire("k", { ttlMs: 300, autoRenew: true });
    assert.equal(await l.lost, "not_held");
    assert.ok(l.signal.aborted);
    const renew = f.got.find((m) => m.commandType === 3)!;
    assert.equal(renew.lockToken, l.lockToken);
    assert.deepEqual(renew.fencingToken, { key: "k", value: 7 });
    await c.close();
  } finally {
    await f.close();
  }
});

test("await using releases the lease at the end of the block", async () => {
  const f = await fake(simple);
  try {
    const c = new Client([f.addr]);
    let lease;
    {
      await using l = await c.acquire("k", { ttlMs: 5000 });
      lease = l;
    }
    assert.equal(lease.reason, "released");
    assert.equal(f.got.filter((m) => m.commandType === 2).length, 1);
    await c.close();
  } finally {
    await f.close();
  }
});

test("a grant that arrives with less than half its TTL left is renewed at once, and the deadline counts from the renew", async () => {
  const f = await fake((m, reply) => {
    if (m.commandType === 1) setTimeout(() => reply(grantOf(m)), 150); // a long wait
    else simple(m, reply);
  });
  try {
    const c = new Client([f.addr]);
    const sent = performance.now();
    const l = await c.acquire("k", { ttlMs: 200 });
    const renews = f.got.filter((m) => m.commandType === 3);
    assert.equal(renews.length, 1, "no renew before the lease was handed out");
    assert.ok(l.sent >= sent + 150, `the lease's sent (${l.sent - sent} ms after the acquire) is the acquire's, not the renew's`);
    await l.release();
    await c.close();
  } finally {
    await f.close();
  }
});
