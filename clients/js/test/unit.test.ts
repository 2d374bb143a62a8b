/**
 * Unit tests that need no server: backoff, deadline arithmetic, token
 * parsing of both shapes, request encoding, validation, handshake
 * redirects, and the lease's own timers.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { backoffMs, deadlineOf, needsEarlyRenew, renewDelayMs } from "../src/timing.js";
import { checkKey, checkTtl, decodeReply, encodeRequest, newHandle, parseToken, base64url } from "../src/wire.js";
import {
  errorFromReply,
  CancelledError,
  ErrorCodes,
  ForbiddenError,
  HeldError,
  LockgateError,
  NotHeldError,
  QuotaExceededError,
  RateLimitedError,
  TimeoutError,
} from "../src/errors.js";
import { parseFeatures, protocolsFor, redirectOf, wsUrl } from "../src/socket.js";
import { Lease, LeaseLostError, type LeaseOps } from "../src/lease.js";
import { Client } from "../src/index.js";

test("backoff: 50 ms doubling to 2 s, full jitter", () => {
  const top = () => 0.999999;
  assert.equal(Math.round(backoffMs(1, 50, 2000, top)), 50);
  assert.equal(Math.round(backoffMs(2, 50, 2000, top)), 100);
  assert.equal(Math.round(backoffMs(5, 50, 2000, top)), 800);
  assert.equal(Math.round(backoffMs(6, 50, 2000, top)), 1600);
  assert.equal(Math.round(backoffMs(7, 50, 2000, top)), 2000);
  assert.equal(Math.round(backoffMs(1000, 50, 2000, top)), 2000); // no overflow
  assert.equal(backoffMs(3, 50, 2000, () => 0), 0); // full jitter reaches 0
  assert.equal(backoffMs(3, 50, 2000, () => 0.5), 100);
  for (let i = 0; i < 1000; i++) {
    const d = backoffMs(4);
    assert.ok(d >= 0 && d < 400, `attempt 4 drew ${d}`);
  }
});

test("deadline: sent + ttl − (ttl·0.01 + 2 ms)", () => {
  assert.equal(deadlineOf(1000, 10_000), 1000 + 10_000 - 102);
  assert.equal(deadlineOf(0, 20_000), 20_000 - 202);
  assert.equal(deadlineOf(5, 10), 5 + 10 - 2.1);
  assert.equal(deadlineOf(5, 1), 5); // never before sent
  assert.equal(renewDelayMs(3000), 1000);
});

test("a grant with less than half its TTL left of sent + ttl is renewed at once", () => {
  assert.equal(needsEarlyRenew(0, 1000, 400), false);
  assert.equal(needsEarlyRenew(0, 1000, 499), false);
  assert.equal(needsEarlyRenew(0, 1000, 501), true);
  assert.equal(needsEarlyRenew(0, 1000, 5000), true);
});

test("fencing tokens: {key, value}, bare numbers and numeric strings, exact beyond 2^53", () => {
  assert.equal(parseToken({ key: "k", value: 7 }), 7n);
  assert.equal(parseToken(7), 7n);
  assert.equal(parseToken("18446744073709551615"), 18446744073709551615n);
  assert.equal(parseToken(undefined), undefined);
  assert.equal(parseToken(-1), undefined);
  assert.equal(parseToken(1.5), undefined);
  assert.equal(parseToken("x"), undefined);

  const big = "18446744073709551615"; // 2^64 − 1: JSON.parse alone would round it
  const v1 = decodeReply(`{"id":"1","type":"grant","success":true,"key":"k","fencingToken":{"key":"k","value":${big}},"lockToken":"ab","ttl":100}`);
  assert.equal(v1.fencingToken, 18446744073709551615n);
  assert.equal(v1.ttl, 100);
  const old = decodeReply(`{"id":"1","type":"grant","fencingToken" : 9007199254740993,"lockToken":"ab"}`);
  assert.equal(old.fencingToken, 9007199254740993n);
  const held = decodeReply(`{"id":"2","type":"error","error":{"code":"held","holder":{"owner":"a","fencingToken":${big},"expiresIn":5}}}`);
  assert.equal(held.error?.holder?.fencingToken, 18446744073709551615n);
  assert.equal(held.error?.holder?.expiresInMs, 5);
  const v1holder = decodeReply(`{"id":"2","type":"error","error":{"code":"held","holder":{"owner":"a","fencingToken":{"key":"k","value":3}}}}`);
  assert.equal(v1holder.error?.holder?.fencingToken, 3n);
  // A string value that looks like a field is left alone.
  const info = decodeReply(`{"id":"3","type":"info","value":"\\"value\\":12345678901234567890","fencingToken":{"key":"k","value":4}}`);
  assert.equal(info.value, `"value":12345678901234567890`);
  assert.equal(info.fencingToken, 4n);
  assert.throws(() => decodeReply("[1]"));
  assert.throws(() => decodeReply("null"));
});

test("requests encode fencing tokens as exact JSON numbers", () => {
  const s = encodeRequest({ id: "1", commandType: 3, key: "k", lockToken: "ab", fencingToken: { key: "k", value: 18446744073709551615n }, ttl: 100 });
  assert.equal(s, `{"id":"1","commandType":3,"key":"k","lockToken":"ab","ttl":100,"fencingToken":{"key":"k","value":18446744073709551615}}`);
  // Strings are left as they are, whatever they look like.
  const t = encodeRequest({ commandType: 1, key: "k", value: "\u0000big:1 \"value\":2" });
  assert.equal(JSON.parse(t).value, "\u0000big:1 \"value\":2");
  assert.equal(encodeRequest({ commandType: 2, fencingToken: { key: "\"k", value: 1n } }), `{"commandType":2,"fencingToken":{"key":"\\"k","value":1}}`);
});

test("handles are 32 lowercase hex digits", () => {
  const h = newHandle();
  assert.match(h, /^[0-9a-f]{32}$/);
  assert.notEqual(h, newHandle());
});

test("validation mirrors the server's", () => {
  assert.throws(() => checkKey(""), (e: LockgateError) => e.code === "invalid_key");
  assert.throws(() => checkKey("k".repeat(257)), (e: LockgateError) => e.code === "invalid_key");
  assert.throws(() => checkKey("é".repeat(129)), (e: LockgateError) => e.code === "invalid_key"); // 258 bytes
  assert.throws(() => checkKey("a\nb"), (e: LockgateError) => e.code === "invalid_key");
  assert.throws(() => checkKey("a\ud800"), (e: LockgateError) => e.code === "invalid_key");
  checkKey("k".repeat(256));
  checkKey("orders/42");
  for (const bad of [0, 5, 9, -1, 1.5, 24 * 3600_000 + 1, NaN]) {
    assert.throws(() => checkTtl(bad), (e: LockgateError) => e.code === "invalid_ttl", `ttl ${bad}`);
  }
  checkTtl(10);
  checkTtl(24 * 3600_000);
});

test("error replies become typed errors with the protocol's code", () => {
  const h = errorFromReply({ code: "held", message: "m", holder: { owner: "a", fencingToken: 3n } }, "try-acquire k");
  assert.ok(h instanceof HeldError && h.code === "held" && h.holder.owner === "a" && h.holder.fencingToken === 3n);
  assert.ok(errorFromReply({ code: "not_held" }, "x") instanceof NotHeldError);
  assert.ok(errorFromReply({ code: "timeout" }, "x") instanceof TimeoutError);
  assert.ok(errorFromReply({ code: "cancelled" }, "x") instanceof CancelledError);
  const nl = errorFromReply({ code: "not_leader", leader: { id: "2", addr: "h:2" } }, "x");
  assert.equal(nl.code, "not_leader");
  assert.equal(nl.leader?.addr, "h:2");
  assert.equal(errorFromReply(undefined, "x").code, "internal");
  assert.ok(nl instanceof LockgateError && nl instanceof Error);
});

test("the tenants' codes: forbidden, quota_exceeded naming its quota, rate_limited retryable with retryIn", () => {
  for (const c of ["forbidden", "quota_exceeded", "rate_limited", "too_many_sessions"]) assert.ok((ErrorCodes as readonly string[]).includes(c), c);
  const f = errorFromReply({ code: "forbidden", message: "not yours" }, "acquire k");
  assert.ok(f instanceof ForbiddenError && f.code === "forbidden");
  const q = errorFromReply({ code: "quota_exceeded", message: "at most 2", quota: "sessions" }, "open-session");
  assert.ok(q instanceof QuotaExceededError);
  assert.equal(q.quota, "sessions");
  assert.match(q.message, /quota "sessions"/);
  const r = errorFromReply({ code: "rate_limited", message: "slow down", retryIn: 250 }, "try-acquire k");
  assert.ok(r instanceof RateLimitedError && r instanceof LockgateError);
  assert.equal(r.retryInMs, 250);
  assert.equal(r.retryable, true);
  assert.equal((errorFromReply({ code: "rate_limited" }, "x") as RateLimitedError).retryInMs, 0);
});

test("endpoints and handshakes", () => {
  assert.equal(wsUrl("127.0.0.1:5", false), "ws://127.0.0.1:5/v1/ws");
  assert.equal(wsUrl("127.0.0.1:5", true), "wss://127.0.0.1:5/v1/ws");
  assert.equal(wsUrl("https://h:5", false), "wss://h:5/v1/ws");
  assert.equal(wsUrl("ws://h:5/custom", false), "ws://h:5/custom");
  assert.throws(() => wsUrl("ftp://h:5", false), LockgateError);
  assert.equal(redirectOf(421, undefined, `{"error":{"code":"not_leader","leader":{"id":"1","addr":"10.0.0.1:50051"}}}`), "10.0.0.1:50051");
  assert.equal(redirectOf(421, undefined, `{"error":{"code":"not_leader","leader":{}}}`), "");
  assert.equal(redirectOf(307, "http://10.0.0.2:50052/v1/ws", ""), "10.0.0.2:50052");
  assert.equal(redirectOf(503, "http://10.0.0.2:50052/v1/ws", ""), "");
  assert.deepEqual(parseFeatures("wanted, other"), ["wanted", "other"]);
  assert.deepEqual(parseFeatures(undefined), []);
  assert.deepEqual(protocolsFor(undefined), ["lockgate.v1"]);
  assert.deepEqual(protocolsFor("s3cr?t>"), ["lockgate.v1", "lockgate.bearer." + base64url("s3cr?t>")]);
  assert.equal(base64url("s3cr?t>"), "czNjcj90Pg"); // no padding, url alphabet
  assert.throws(() => new Client([]), LockgateError);
  assert.throws(() => new Client(["wss://a:1", "ws://b:2"]), LockgateError);
});

/** alive keeps the event loop running while p settles: lease timers are unref'd (the client's socket holds the loop open). */
async function alive<T>(p: Promise<T>): Promise<T> {
  const t = setInterval(() => {}, 1000);
  try {
    return await p;
  } finally {
    clearInterval(t);
  }
}

function fakeOps(over: Partial<LeaseOps> = {}): LeaseOps {
  return { renew: async () => performance.now(), release: async () => {}, untrack: () => {}, ...over };
}

test("a lease past its deadline ends as expired: lost resolves and signal aborts", async () => {
  const sent = performance.now();
  const l = new Lease(fakeOps(), { key: "k", owner: "o", lockToken: "t", fencingToken: 1n, ttlMs: 50, sent, autoRenew: false, wanted: false });
  assert.equal(l.deadline, deadlineOf(sent, 50));
  assert.ok(l.held);
  const why = await alive(l.lost);
  assert.equal(why, "expired");
  assert.ok(performance.now() >= l.deadline);
  assert.ok(l.signal.aborted && l.signal.reason instanceof LeaseLostError);
  assert.equal(l.held, false);
});

test("auto-renew at ttl/3 keeps a lease; a renew answered not_held ends it", async () => {
  // Awaits the renewals themselves, not a sleep: a loaded machine delays
  // timers, and a 600 ms lease renewed at 200 ms has 400 ms of slack.
  let renewals = 0;
  let refuse = false;
  let third!: () => void;
  const threeRenewals = new Promise<void>((r) => (third = r));
  const ops = fakeOps({
    renew: async () => {
      renewals++;
      if (renewals === 3) third();
      if (refuse) throw new NotHeldError("gone");
      return performance.now();
    },
  });
  const l = new Lease(ops, { key: "k", owner: "o", lockToken: "t", fencingToken: 1n, ttlMs: 600, sent: performance.now(), autoRenew: true, wanted: false });
  await alive(threeRenewals); // a whole TTL of renewals (the lease's timers do not hold the event loop)
  assert.equal(l.reason, undefined);
  refuse = true;
  assert.equal(await alive(l.lost), "not_held");
});

test("wanted: the grant's flag or a push resolves lease.wanted", async () => {
  const l = new Lease(fakeOps(), { key: "k", owner: "o", lockToken: "t", fencingToken: 1n, ttlMs: 10_000, sent: performance.now(), autoRenew: false, wanted: true });
  await l.wanted;
  assert.ok(l.isWanted);
  l._end("released");
  assert.equal(await l.lost, "released");
});

test("a client with no reachable endpoint: one-shot calls fail unavailable within requestTimeoutMs; acquire honours its signal", async () => {
  const c = new Client(["127.0.0.1:1"], { requestTimeoutMs: 300, dialTimeoutMs: 100 });
  const t0 = performance.now();
  await assert.rejects(c.inspect("k"), (e: LockgateError) => e.code === "unavailable");
  const took = performance.now() - t0;
  assert.ok(took >= 290 && took < 2000, `took ${took}`);
  await assert.rejects(c.acquire("k", { signal: AbortSignal.timeout(200) }), (e: LockgateError) => e.code === "cancelled");
  await assert.rejects(c.acquire("k", { waitMs: 100 }), (e: LockgateError) => e.code === "timeout");
  await c.close();
  await assert.rejects(c.acquire("k"), (e: LockgateError) => e.code === "closed");
});
