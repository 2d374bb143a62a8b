/**
 * The client's arithmetic of time: retry backoff and lease deadlines. Pure
 * functions, so the rules are unit-tested without a server.
 */
/** Backoff of reconnects and retries: 50 ms doubling to 2 s, full jitter. */
export const BackoffBaseMs = 50;
export const BackoffMaxMs = 2000;
/**
 * backoffMs is the pause before retry number `attempt` (1, 2, …): a uniform
 * draw from [0, min(max, base·2^(attempt−1))) ("full jitter"), so that
 * clients that failed together do not retry together.
 */
export function backoffMs(attempt, baseMs = BackoffBaseMs, maxMs = BackoffMaxMs, rand = Math.random) {
    const n = Math.max(1, Math.floor(attempt));
    const cap = Math.min(maxMs, baseMs * 2 ** Math.min(n - 1, 30));
    return rand() * cap;
}
/**
 * deadlineOf is the last instant (on the performance.now() clock) the holder
 * may act on a lease whose TTL started no earlier than `sentMs`:
 * sent + ttl − (ttl·0.01 + 2 ms) (docs/protocol.md, "Leases, tokens and
 * deadlines"). `sentMs` is when the first copy of the acquire, or the
 * answered renew, was sent.
 */
export function deadlineOf(sentMs, ttlMs) {
    return sentMs + Math.max(0, ttlMs - (ttlMs * 0.01 + 2));
}
/**
 * needsEarlyRenew: a grant that arrives with less than half its TTL left of
 * sent + ttl (it came after a long wait, and the server started the TTL at
 * some unknown instant since `sentMs`) is renewed at once.
 */
export function needsEarlyRenew(sentMs, ttlMs, nowMs) {
    return sentMs + ttlMs - nowMs < ttlMs / 2;
}
/** renewDelayMs: auto-renew runs ttl/3 after the lease's TTL (re)started. */
export function renewDelayMs(ttlMs) {
    return ttlMs / 3;
}
/** now is the monotonic clock every deadline is measured on. */
export function now() {
    return performance.now();
}
