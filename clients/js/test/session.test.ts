/**
 * Sessions against scripted gateways: the client's own session
 * (one openSession, acquires naming it, one keep-alive for every lease and
 * no per-lease renewal), the deadline rule (sent of the last open/renew +
 * ttl − drift), a refused keep-alive and a passed deadline ending every
 * lease, the keep-alive across a dropped connection and a leader change,
 * opting out (option, explicit ttlMs, a gateway without "sessions"), the
 * explicit API (open, renew, close, acquire in a session) and close.
 */
import { mock, test } from "node:test";
import assert from "node:assert/strict";
import { Client, ForbiddenError, LockgateError, RateLimitedError, Session, SessionExpiredError, deadlineOf } from "../src/index.js";
import { fakeGateway, type FakeGateway, type Msg } from "./gateway.js";
import type { WebSocket } from "ws";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A session gateway's script: how it answers renewSession (12) and closeSession (13); everything else is granted. */
interface Script {
  /** Answers a renewSession; default: sessionRenewed. Return false to send nothing. */
  renew?: (m: Msg, reply: (r: Msg) => void, ws: WebSocket, conn: number) => boolean | void;
  acquire?: (m: Msg, reply: (r: Msg) => void) => boolean | void;
  /** Answers an openSession; default: a new session. Return false to send nothing more. */
  open?: (m: Msg, reply: (r: Msg) => void) => boolean | void;
  features?: string;
  /** The TTL the gateway answers openSession with when none is asked. */
  ttl?: number;
}

interface SessionGateway extends FakeGateway {
  /** performance.now() at which each request arrived, by id and connection. */
  at: Map<string, number>;
  sessions: string[];
  /** Resolves when n requests of commandType cmd have arrived. */
  count(cmd: number, n: number): Promise<void>;
  of(cmd: number): Array<Msg & { conn: number }>;
}

async function sessionGateway(script: Script = {}): Promise<SessionGateway> {
  const at = new Map<string, number>();
  const sessions: string[] = [];
  let token = 0;
  const f = await fakeGateway(
    (m, reply, ws, conn) => {
      at.set(`${conn}/${m.id}`, performance.now());
      switch (m.commandType) {
        case 11: {
          if (script.open?.(m, reply) === false) return;
          const id = `s${sessions.length + 1}`.padEnd(32, "0");
          sessions.push(id);
          reply({ type: "session", sessionId: id, ttl: m.ttl ?? script.ttl ?? 20_000 });
          return;
        }
        case 12:
          if (script.renew?.(m, reply, ws, conn) === false) return;
          reply({ type: "sessionRenewed", sessionId: m.sessionId, ttl: 0 });
          return;
        case 13:
          reply({ type: "sessionClosed", sessionId: m.sessionId });
          return;
        case 1:
        case 5: {
          if (script.acquire?.(m, reply) === false) return;
          token++;
          reply({ type: "grant", key: m.key, fencingToken: { key: m.key, value: token }, lockToken: m.lockToken, ttl: m.ttl ?? 20_000, owner: m.clientId, ...(m.sessionId ? { sessionId: m.sessionId } : {}) });
          return;
        }
        case 7:
        case 8:
          token++;
          reply({ type: "grants", leases: m.keys.map((k: string) => ({ key: k, fencingToken: { key: k, value: token }, lockToken: m.lockToken, ttl: m.ttl, ...(m.sessionId ? { sessionId: m.sessionId } : {}) })) });
          return;
        case 2:
          reply({ type: "released", key: m.key });
          return;
        case 3:
          reply({ type: "renewed", key: m.key, fencingToken: m.fencingToken, ttl: m.ttl });
          return;
      }
    },
    { features: script.features ?? "wanted,multikey,sessions" },
  );
  const of = (cmd: number) => f.got.filter((m) => m.commandType === cmd);
  const count = async (cmd: number, n: number) => {
    const end = performance.now() + 10_000;
    while (of(cmd).length < n) {
      if (performance.now() > end) throw new Error(`${n} requests of command ${cmd} did not arrive (got ${of(cmd).length})`);
      await sleep(5);
    }
  };
  return Object.assign(f, { at, sessions, count, of });
}

test("the client's own session: one openSession, every auto-renewed lease in it, one keep-alive for all and no per-lease renewal", async () => {
  const f = await sessionGateway();
  try {
    const c = new Client([f.addr], { sessionTtlMs: 300 });
    const leases = await Promise.all(["a", "b", "c"].map((k) => c.acquire(k)));
    const all = await c.acquireAll(["d", "e"]);
    assert.equal(f.of(11).length, 1, "one session for every lease");
    assert.equal(f.of(11)[0]!.ttl, 300);
    assert.equal(f.of(11)[0]!.clientId, c.clientId);
    const s = c.session!;
    assert.ok(s instanceof Session);
    assert.equal(s.id, f.sessions[0]);
    for (const m of [...f.of(1), ...f.of(7)]) {
      assert.equal(m.sessionId, s.id);
      assert.equal(m.ttl, undefined, "a session lease takes the session's TTL");
    }
    for (const l of [...leases, ...all]) {
      assert.equal(l.session, s);
      assert.equal(l.autoRenew, false);
      assert.equal(l.deadline, s.deadline);
    }
    assert.equal(s.leases, 5);
    const before = s.deadline;
    await f.count(12, 3); // three keep-alives, at ttl/3 each
    assert.equal(f.of(3).length, 0, "no lease renewed itself");
    for (const m of f.of(12)) {
      assert.equal(m.sessionId, s.id);
      assert.equal(m.ttl, 300, "the session's TTL, for a gateway that has not seen it");
    }
    await sleep(20);
    assert.ok(s.deadline > before, "the keep-alives moved the session's deadline");
    for (const l of [...leases, ...all]) {
      assert.equal(l.deadline, s.deadline, "every lease follows its session");
      assert.ok(l.held);
    }
    await leases[0]!.release();
    assert.equal(s.leases, 4, "a released lease leaves its session");
    await c.close();
  } finally {
    await f.close();
  }
});

test("the deadline rule: a session lease's deadline is the last open or keep-alive's send time + ttl − drift, not its answer's", async () => {
  let delay = 0;
  const f = await sessionGateway({
    renew: (m, reply) => {
      setTimeout(() => reply({ type: "sessionRenewed", sessionId: m.sessionId, ttl: 600 }), delay);
      return false;
    },
  });
  try {
    const c = new Client([f.addr]);
    const s = await c.openSession({ ttlMs: 600, keepAlive: false });
    const open = f.of(11)[0]!;
    assert.ok(s.sent <= f.at.get(`${open.conn}/${open.id}`)!, "the session counts from the open's send");
    assert.equal(s.deadline, deadlineOf(s.sent, 600));
    const l = await c.acquire("k", { session: s });
    const acquired = performance.now();
    assert.equal(l.deadline, s.deadline, "acquiring in a session does not move its deadline");
    assert.ok(l.deadline < acquired + 600 - 8, "nor does the lease count from its own acquire");
    delay = 150;
    const beforeRenew = performance.now();
    await l.renew(); // a session lease's renew is its session's keep-alive
    const renew = f.of(12)[0]!;
    assert.equal(f.of(3).length, 0);
    const got = f.at.get(`${renew.conn}/${renew.id}`)!;
    assert.ok(s.sent >= beforeRenew && s.sent <= got, "the keep-alive's send time, before the gateway saw it");
    assert.equal(s.deadline, deadlineOf(s.sent, 600));
    assert.ok(s.deadline < got + 600 - 8, "the answer came 150 ms later, and does not count");
    assert.equal(l.deadline, s.deadline);
    assert.equal(s.renewals, 1);
    await assert.rejects(l.renew(5000), (e: LockgateError) => e.code === "invalid_ttl");
    await c.close();
  } finally {
    await f.close();
  }
});

test("a refused keep-alive (session_expired) ends every lease of the session; the next acquire opens a new session", async () => {
  let refuse = true;
  const f = await sessionGateway({
    renew: (m, reply) => {
      if (!refuse) return;
      reply({ type: "error", error: { code: "session_expired", message: "no such session" } });
      return false;
    },
  });
  try {
    const c = new Client([f.addr], { sessionTtlMs: 300 });
    const leases = await Promise.all(["a", "b"].map((k) => c.acquire(k)));
    const s = c.session!;
    const why = await Promise.all(leases.map((l) => l.lost));
    assert.deepEqual(why, ["not_held", "not_held"]);
    for (const l of leases) assert.ok(l.signal.aborted);
    assert.equal(await s.ended, "not_held");
    assert.equal(c.session, undefined);
    refuse = false;
    const l = await c.acquire("c");
    assert.equal(f.of(11).length, 2, "a new session");
    assert.notEqual(l.session, s);
    assert.equal(f.of(1).at(-1)!.sessionId, f.sessions[1]);
    await c.close();
  } finally {
    await f.close();
  }
});

test("a session whose keep-alives go unanswered ends at its deadline, and every lease with it, expired", async () => {
  const f = await sessionGateway({ renew: () => false });
  try {
    const c = new Client([f.addr], { sessionTtlMs: 300, requestTimeoutMs: 5_000 });
    const leases = await Promise.all(["a", "b", "c"].map((k) => c.acquire(k)));
    const deadline = leases[0]!.deadline;
    const why = await Promise.all(leases.map((l) => l.lost));
    const ended = performance.now();
    assert.deepEqual(why, ["expired", "expired", "expired"]);
    assert.ok(ended >= deadline, "no lease ended before its deadline");
    assert.ok(f.of(12).length >= 1, "the keep-alive was tried");
    await c.close();
  } finally {
    await f.close();
  }
});

test("the keep-alive survives a dropped connection and a leader change: renewSession is re-sent", async () => {
  const leader = await sessionGateway();
  let n = 0;
  const first = await sessionGateway({
    renew: (m, reply, ws) => {
      n++;
      if (n === 1) ws.terminate(); // dropped with its connection
      else reply({ type: "error", error: { code: "not_leader", message: "moved", leader: { id: "2", addr: leader.addr } } });
      return false;
    },
  });
  try {
    const c = new Client([first.addr], { sessionTtlMs: 600 });
    const l = await c.acquire("k");
    const s = l.session!;
    await leader.count(12, 1);
    assert.equal(n, 2, "dropped once, then redirected");
    assert.equal(first.of(12)[0]!.conn, 1);
    assert.equal(first.of(12)[1]!.conn, 2);
    assert.equal(leader.of(12)[0]!.sessionId, s.id);
    await sleep(20);
    assert.equal(s.renewals, 1);
    assert.equal(l.reason, undefined);
    assert.ok(l.held);
    await c.close();
  } finally {
    await Promise.all([leader.close(), first.close()]);
  }
});

test("opting out: sessions: false, an explicit ttlMs, session: null, autoRenew false and a gateway without sessions renew per lease", async () => {
  const f = await sessionGateway();
  const old = await sessionGateway({ features: "wanted" });
  try {
    const off = new Client([f.addr], { sessions: false });
    const a = await off.acquire("a", {});
    assert.equal(a.session, undefined);
    assert.equal(a.autoRenew, true);
    await off.close();
    const c = new Client([f.addr]);
    const b = await c.acquire("b", { ttlMs: 5000, autoRenew: true });
    const d = await c.acquire("d", { session: null });
    const e = await c.acquire("e", { autoRenew: false });
    for (const l of [b, d, e]) assert.equal(l.session, undefined);
    assert.equal(f.of(11).length, 0, "no session opened");
    for (const m of f.of(1)) assert.equal(m.sessionId, undefined);
    await c.close();
    const o = new Client([old.addr]);
    const l = await o.acquire("x", { ttlMs: undefined });
    assert.equal(l.session, undefined);
    assert.equal(l.autoRenew, true);
    assert.equal(old.of(11).length, 0, "nothing sent for a feature the gateway did not announce");
    await assert.rejects(o.openSession(), (err: LockgateError) => err.code === "unsupported");
    await o.close();
  } finally {
    await Promise.all([f.close(), old.close()]);
  }
});

test("explicit sessions: open, acquire in it, close releases its leases; a session already gone fails session_expired", async () => {
  let expired = false;
  const f = await sessionGateway({
    acquire: (m, reply) => {
      if (!expired) return;
      reply({ type: "error", error: { code: "session_expired", message: "gone" } });
      return false;
    },
  });
  try {
    const c = new Client([f.addr]);
    const s = await c.openSession({ ttlMs: 5000, clientId: "svc-1" });
    assert.equal(f.of(11)[0]!.clientId, "svc-1");
    const [x, y] = [await c.acquire("x", { session: s }), await c.tryAcquire("y", { session: s, ttlMs: 5000 })];
    await assert.rejects(c.acquire("z", { session: s, ttlMs: 1000 }), (e: LockgateError) => e.code === "invalid_ttl");
    assert.equal(c.session, undefined, "an explicit session is not the client's own");
    await c.closeSession(s);
    assert.equal(f.of(13)[0]!.sessionId, s.id);
    assert.deepEqual([await x.lost, await y.lost, await s.ended], ["released", "released", "released"]);
    await assert.rejects(c.acquire("z", { session: s }), SessionExpiredError);

    const t = await c.openSession({ ttlMs: 5000 });
    const held = await c.acquire("w", { session: t });
    expired = true; // the server lost the session: an acquire in it is refused
    await assert.rejects(c.acquire("v", { session: t }), SessionExpiredError);
    assert.equal(await held.lost, "not_held");
    await c.close();
  } finally {
    await f.close();
  }
});

test("an acquire answered session_expired in the client's own session opens a new one and acquires again", async () => {
  let refused = 0;
  const f = await sessionGateway({
    acquire: (m, reply) => {
      if (refused > 0) return;
      refused++;
      reply({ type: "error", error: { code: "session_expired", message: "gone" } });
      return false;
    },
  });
  try {
    const c = new Client([f.addr]);
    const l = await c.acquire("k");
    assert.equal(f.of(11).length, 2);
    const [first, second] = f.of(1);
    assert.equal(first!.sessionId, f.sessions[0]);
    assert.equal(second!.sessionId, f.sessions[1]);
    assert.equal(l.session?.id, f.sessions[1]);
    await c.close();
  } finally {
    await f.close();
  }
});

test("close stops the keep-alive: no renewSession after it, and the session's leases run out (expired), not released", async () => {
  const f = await sessionGateway();
  try {
    const c = new Client([f.addr], { sessionTtlMs: 300 });
    const l = await c.acquire("k");
    await c.close();
    const sent = f.of(12).length;
    assert.equal(await l.lost, "expired");
    assert.equal(f.of(12).length, sent, "no keep-alive after close");
    assert.equal(f.of(13).length, 0, "close does not close the session");
    assert.equal(f.of(2).length, 0);
  } finally {
    await f.close();
  }
});

test("the client's own session is replaced once: an acquire refused session_expired twice fails; with cacheLeases there is no own session", async () => {
  const f = await sessionGateway({
    acquire: (m, reply) => {
      if (!m.sessionId) return;
      reply({ type: "error", error: { code: "session_expired", message: "gone" } });
      return false;
    },
  });
  try {
    const c = new Client([f.addr]);
    await assert.rejects(c.acquire("k"), SessionExpiredError);
    assert.equal(f.of(11).length, 2, "one new session, not one per refusal");
    await c.close();
    const cached = new Client([f.addr], { cacheLeases: true });
    const l = await cached.acquire("k");
    assert.equal(l.session, undefined, "as the Go SDK: the cache keeps and renews leases of its own");
    assert.equal(f.of(11).length, 2);
    await cached.close();
  } finally {
    await f.close();
  }
});

for (const code of ["quota_exceeded", "too_many_sessions"]) {
  test(`a session refused ${code} never fails an acquire: the lease renews itself, one warning, counted, asked for again after sessionRetryMs`, async () => {
    let refuse = true;
    const f = await sessionGateway({
      open: (m, reply) => {
        if (!refuse) return;
        reply({ type: "error", error: { code, message: "at the identity's quota", quota: "sessions" } });
        return false;
      },
    });
    const warn = mock.method(console, "warn", () => {});
    try {
      const retry = 600;
      const c = new Client([f.addr], { sessionTtlMs: 300, sessionRetryMs: retry });
      const leases = [await c.acquire("a"), await c.tryAcquire("b"), ...(await c.acquireAll(["c", "d"]))];
      for (const l of leases) {
        assert.equal(l.session, undefined, "no session: the gateway refused it");
        assert.equal(l.autoRenew, true);
        assert.equal(l.ttlMs, 300, "the session's TTL");
      }
      assert.equal(f.of(11).length, 1, "not asked again within sessionRetryMs");
      for (const m of [...f.of(1), ...f.of(5), ...f.of(7)]) {
        assert.equal(m.sessionId, undefined);
        assert.equal(m.ttl, 300);
      }
      assert.deepEqual(c.sessionStats(), { opened: 0, refused: 1, fallbacks: 3, fallingBack: true });
      assert.equal(warn.mock.callCount(), 1, "warned once");
      assert.match(String(warn.mock.calls[0]!.arguments[0]), /refused the client's session/);

      // Each lease renews itself past its TTL.
      const first = leases[0]!.deadline;
      await f.count(3, 3 * leases.length);
      assert.ok(performance.now() > first, "three renewals of every lease take longer than its TTL");
      for (const l of leases) {
        assert.ok(l.held, "alive past its first deadline");
        assert.ok(l.deadline > first);
      }

      // Allowed again: the first acquire after sessionRetryMs opens the session.
      refuse = false;
      let inSession;
      for (let i = 0; !inSession; i++) {
        const l = await c.acquire(`again/${i}`);
        if (l.session) inSession = l;
        else await sleep(25);
      }
      const opens = f.of(11);
      assert.equal(opens.length, 2, "the refused open and one after sessionRetryMs");
      const gap = f.at.get(`${opens[1]!.conn}/${opens[1]!.id}`)! - f.at.get(`${opens[0]!.conn}/${opens[0]!.id}`)!;
      assert.ok(gap >= retry - 5, `asked again ${gap} ms after the refusal, before sessionRetryMs`);
      const st = c.sessionStats();
      assert.equal(st.opened, 1);
      assert.equal(st.fallingBack, false);
      assert.equal(st.refused, 1);
      assert.equal(c.session, inSession.session);
      for (const l of leases) assert.ok(l.held, "the fallback leases go on renewing themselves");
      assert.equal(warn.mock.callCount(), 1, "still one warning");
      await c.close();
    } finally {
      warn.mock.restore();
      await f.close();
    }
  });
}

test("a forbidden session fails the acquire; a logger given gets the warnings instead of console.warn", async () => {
  let code = "forbidden";
  const f = await sessionGateway({
    open: (m, reply) => {
      reply({ type: "error", error: { code, message: "no" } });
      return false;
    },
  });
  const warn = mock.method(console, "warn", () => {});
  try {
    const logged: string[] = [];
    const c = new Client([f.addr], { logger: (m) => logged.push(m) });
    await assert.rejects(c.acquire("k"), ForbiddenError);
    assert.deepEqual(c.sessionStats(), { opened: 0, refused: 0, fallbacks: 0, fallingBack: false });
    code = "quota_exceeded";
    const l = await c.acquire("k");
    assert.equal(l.session, undefined);
    assert.equal(c.sessionStats().fallbacks, 1);
    assert.equal(logged.filter((m) => m.includes("refused the client's session")).length, 1);
    assert.equal(warn.mock.callCount(), 0);
    await c.close();
  } finally {
    warn.mock.restore();
    await f.close();
  }
});

test("rate_limited: tryAcquire throws RateLimitedError with retryInMs; acquire waits it out and sends the same acquire again", async () => {
  let limit = 1;
  const f = await sessionGateway({
    acquire: (m, reply) => {
      if (limit <= 0) return;
      limit--;
      reply({ type: "error", error: { code: "rate_limited", message: "slow down", retryIn: 120 } });
      return false;
    },
  });
  try {
    const c = new Client([f.addr], { sessions: false });
    await assert.rejects(c.tryAcquire("k"), (e: RateLimitedError) => e instanceof RateLimitedError && e.retryInMs === 120 && e.retryable);
    limit = 2;
    const start = performance.now();
    const l = await c.acquire("k");
    assert.ok(performance.now() - start >= 2 * 120 - 5, "waited retryIn twice");
    const sent = f.of(1);
    assert.equal(sent.length, 3, "two refused, one granted");
    assert.equal(new Set(sent.map((m) => m.lockToken)).size, 1, "the same acquire");
    assert.ok(l.held);
    limit = 1000;
    const ctl = new AbortController();
    setTimeout(() => ctl.abort(), 300);
    await assert.rejects(c.acquire("k2", { signal: ctl.signal }), (e: LockgateError) => e.code === "cancelled");
    await assert.rejects(c.acquire("k3", { waitMs: 200 }), (e: LockgateError) => e.code === "timeout");
    await c.close();
  } finally {
    await f.close();
  }
});
