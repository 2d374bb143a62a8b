/**
 * @lockgate/client: the TypeScript client of lockgate's WebSocket lock
 * protocol (v1, docs/protocol.md), for Node ≥ 20 and browsers.
 *
 *     const client = new Client(["10.0.0.1:50051", "10.0.0.2:50052"]);
 *     await using lease = await client.acquire("orders/42"); // 20 s TTL, auto-renewed
 *     // act while !lease.signal.aborted; send lease.fencingToken with every write
 */
export { DefaultCacheIdleMs, DefaultMaxCachedLeases } from "./cache.js";
export { Client, DefaultDialTimeoutMs, DefaultMaxHops, DefaultRequestTimeoutMs } from "./client.js";
export { DefaultSessionRetryMs } from "./client.js";
export { Session, SessionLostError } from "./session.js";
export { Lease, LeaseLostError } from "./lease.js";
export { Watch, WatchBuffer } from "./watch.js";
export * as election from "./election.js";
export { CancelledError, DelayedError, ErrorCodes, ForbiddenError, HeldError, LockgateError, NotHeldError, PermitsMismatchError, QuotaExceededError, RateLimitedError, SessionExpiredError, TimeoutError, UnsupportedError, WatchOverflowError, } from "./errors.js";
export { backoffMs, deadlineOf, needsEarlyRenew } from "./timing.js";
export { parseToken, DefaultTtlMs, MaxKeyLen, MinTtlMs, MaxTtlMs, MaxPermits, MaxLockDelayMs, MaxMultiKeys } from "./wire.js";
