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
] as const;

/** One of {@link ErrorCodes}; a newer server may send a code not listed. */
export type ErrorCode = (typeof ErrorCodes)[number] | (string & {});

/** The leader a not_leader error names (empty when unknown). */
export interface LeaderInfo {
  id?: string;
  addr?: string;
}

/** The holder a held error names, where the server knows it. */
export interface HolderInfo {
  owner?: string;
  /** The holder's fencing token (exact: a bigint). */
  fencingToken?: bigint;
  /** Milliseconds the holder's lease had left when the server answered. */
  expiresInMs?: number;
}

/** An error of the lock protocol or of the client, matched by `code`. */
export class LockgateError extends Error {
  override name = "LockgateError";
  /** The protocol's error code. */
  readonly code: ErrorCode;
  /** not_leader: the leader, when known. */
  readonly leader?: LeaderInfo;

  constructor(code: ErrorCode, message: string, opts: { leader?: LeaderInfo; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.code = code;
    if (opts.leader) this.leader = opts.leader;
  }
}

/** held: a tryAcquire found the key held. `holder` names the holder. */
export class HeldError extends LockgateError {
  override name = "HeldError";
  readonly holder: HolderInfo;
  constructor(message: string, holder: HolderInfo = {}) {
    super("held", message);
    this.holder = holder;
  }
}

/** not_held: a renew or release of a lease that expired, was released or re-granted. */
export class NotHeldError extends LockgateError {
  override name = "NotHeldError";
  constructor(message: string) {
    super("not_held", message);
  }
}

/** timeout: an acquire's waitMs ran out before the key was granted. */
export class TimeoutError extends LockgateError {
  override name = "TimeoutError";
  constructor(message: string) {
    super("timeout", message);
  }
}

/** cancelled: the caller's AbortSignal ended a waiting acquire. `cause` is the signal's reason. */
export class CancelledError extends LockgateError {
  override name = "CancelledError";
  constructor(message: string, cause?: unknown) {
    super("cancelled", message, { cause });
  }
}

/** The error for a server's error object (`{code, message, leader?, holder?}`). */
export function errorFromReply(
  e: { code?: string; message?: string; leader?: LeaderInfo; holder?: HolderInfo } | undefined,
  what: string,
): LockgateError {
  const code = e?.code || "internal";
  const msg = `lockgate: ${what}: ${code}${e?.message ? ": " + e.message : ""}`;
  switch (code) {
    case "held":
      return new HeldError(msg, e?.holder ?? {});
    case "not_held":
      return new NotHeldError(msg);
    case "timeout":
      return new TimeoutError(msg);
    case "cancelled":
      return new CancelledError(msg);
  }
  return new LockgateError(code, msg, e?.leader ? { leader: e.leader } : {});
}
