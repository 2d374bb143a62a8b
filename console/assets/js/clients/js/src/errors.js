/**
 * Errors of the lockgate client. Every error the client throws for a
 * protocol condition is a {@link LockgateError} whose `code` is one of the
 * protocol's error codes (docs/protocol.md, "Error codes"); the codes a
 * caller typically branches on have subclasses, so both
 * `err instanceof HeldError` and `err.code === "held"` work.
 */
/** The protocol's error codes (docs/protocol.md), plus none of our own. */
export const ErrorCodes = [
    "bad_json",
    "unknown_command",
    "missing_field",
    "invalid_key",
    "invalid_ttl",
    "invalid_value",
    "invalid_owner",
    "invalid_handle",
    "invalid_wait",
    "too_large",
    "not_found",
    "not_held",
    "held",
    "not_leader",
    "unavailable",
    "closed",
    "cancelled",
    "timeout",
    "too_many_waiters",
    "too_many_locks",
    "too_many_tickets",
    "unauthorized",
    "method_not_allowed",
    "unsupported_media_type",
    "internal",
    "unsupported",
    "invalid_mode",
    "invalid_permits",
    "invalid_lock_delay",
    "invalid_keys",
    "permits_mismatch",
    "delayed",
    "watch_overflow",
    "too_many_watches",
    "duplicate_id",
    "session_expired",
    "too_many_sessions",
    "forbidden",
    "quota_exceeded",
    "rate_limited",
];
/** An error of the lock protocol or of the client, matched by `code`. */
export class LockgateError extends Error {
    name = "LockgateError";
    /** The protocol's error code. */
    code;
    /** not_leader: the leader, when known. */
    leader;
    constructor(code, message, opts = {}) {
        super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
        this.code = code;
        if (opts.leader)
            this.leader = opts.leader;
    }
}
/** held: a tryAcquire found the key held. `holder` names the holder. */
export class HeldError extends LockgateError {
    name = "HeldError";
    holder;
    constructor(message, holder = {}) {
        super("held", message);
        this.holder = holder;
    }
}
/** not_held: a renew or release of a lease that expired, was released or re-granted. */
export class NotHeldError extends LockgateError {
    name = "NotHeldError";
    constructor(message) {
        super("not_held", message);
    }
}
/** timeout: an acquire's waitMs ran out before the key was granted. */
export class TimeoutError extends LockgateError {
    name = "TimeoutError";
    constructor(message) {
        super("timeout", message);
    }
}
/** cancelled: the caller's AbortSignal ended a waiting acquire. `cause` is the signal's reason. */
export class CancelledError extends LockgateError {
    name = "CancelledError";
    constructor(message, cause) {
        super("cancelled", message, { cause });
    }
}
/**
 * unsupported: the gateway's backend does not offer a feature the call
 * needs (`feature`: shared, semaphore, lockdelay, multikey, watch). The
 * client raises it itself, before sending, when the gateway did not
 * announce the feature in Lockgate-Features.
 */
export class UnsupportedError extends LockgateError {
    name = "UnsupportedError";
    feature;
    constructor(message, feature = "") {
        super("unsupported", message);
        this.feature = feature;
    }
}
/** delayed: a tryAcquire found the key free but in its lock-delay; try again after `retryInMs`. */
export class DelayedError extends LockgateError {
    name = "DelayedError";
    retryInMs;
    constructor(message, retryInMs = 0) {
        super("delayed", message);
        this.retryInMs = retryInMs;
    }
}
/** permits_mismatch: a semaphore acquire asked for another number of permits than the key's holders hold it with. */
export class PermitsMismatchError extends LockgateError {
    name = "PermitsMismatchError";
    constructor(message) {
        super("permits_mismatch", message);
    }
}
/** watch_overflow: a watch fell behind the key's changes and was ended; watch again. */
export class WatchOverflowError extends LockgateError {
    name = "WatchOverflowError";
    constructor(message) {
        super("watch_overflow", message);
    }
}
/**
 * session_expired: the session is gone (it expired, or was closed): a
 * keep-alive, a close or an acquire in it was refused. Every lease of the
 * session has ended (reason "not_held").
 */
export class SessionExpiredError extends LockgateError {
    name = "SessionExpiredError";
    constructor(message) {
        super("session_expired", message);
    }
}
/**
 * forbidden: the caller's identity may not do this (on this key): the
 * gateway's policy, or an admin action with a client's credential.
 */
export class ForbiddenError extends LockgateError {
    name = "ForbiddenError";
    constructor(message) {
        super("forbidden", message);
    }
}
/**
 * quota_exceeded: the caller's identity holds as many of something as its
 * quota allows; `quota` names which ("sessions", "leases", "waiters",
 * "watches"; "" when the gateway did not say). Other identities are not
 * affected: release or close something first. A refused open of the
 * client's own session never fails an acquire (ClientOptions.sessions).
 */
export class QuotaExceededError extends LockgateError {
    name = "QuotaExceededError";
    quota;
    constructor(message, quota = "") {
        super("quota_exceeded", message);
        this.quota = quota;
    }
}
/**
 * rate_limited: the caller's identity sent requests faster than its rate
 * allows, and this one was not carried out: retry after `retryInMs` (0:
 * the gateway did not say; back off). `retryable` is true. A waiting
 * acquire waits it out and tries again by itself (within its waitMs and
 * signal); a tryAcquire throws it. Keep-alives and renewals are never
 * rate-limited.
 */
export class RateLimitedError extends LockgateError {
    name = "RateLimitedError";
    retryInMs;
    retryable = true;
    constructor(message, retryInMs = 0) {
        super("rate_limited", message);
        this.retryInMs = retryInMs;
    }
}
/** The error for a server's error object (`{code, message, leader?, holder?, retryIn?, feature?, quota?}`). */
export function errorFromReply(e, what) {
    const code = e?.code || "internal";
    const msg = `lockgate: ${what}: ${code}${e?.quota ? ` (quota ${JSON.stringify(e.quota)})` : ""}${e?.message ? ": " + e.message : ""}`;
    switch (code) {
        case "held":
            return new HeldError(msg, e?.holder ?? {});
        case "not_held":
            return new NotHeldError(msg);
        case "timeout":
            return new TimeoutError(msg);
        case "cancelled":
            return new CancelledError(msg);
        case "unsupported":
            return new UnsupportedError(msg, e?.feature ?? "");
        case "delayed":
            return new DelayedError(msg, typeof e?.retryIn === "number" ? e.retryIn : 0);
        case "permits_mismatch":
            return new PermitsMismatchError(msg);
        case "watch_overflow":
            return new WatchOverflowError(msg);
        case "session_expired":
            return new SessionExpiredError(msg);
        case "forbidden":
            return new ForbiddenError(msg);
        case "quota_exceeded":
            return new QuotaExceededError(msg, typeof e?.quota === "string" ? e.quota : "");
        case "rate_limited":
            return new RateLimitedError(msg, typeof e?.retryIn === "number" && e.retryIn > 0 ? e.retryIn : 0);
    }
    return new LockgateError(code, msg, e?.leader ? { leader: e.leader } : {});
}
