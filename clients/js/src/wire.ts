/**
 * The WebSocket protocol's messages (docs/protocol.md): encoding requests,
 * decoding replies with exact fencing tokens, and the client-side checks
 * that mirror the server's (so a bad key fails before a round trip).
 */
import { LockgateError, type HolderInfo, type LeaderInfo } from "./errors.js";

/** Command types (the commandType field). */
export const Cmd = {
  acquire: 1,
  release: 2,
  renew: 3,
  inspect: 4,
  tryAcquire: 5,
  cancel: 6,
  acquireAll: 7,
  tryAcquireAll: 8,
  watch: 9,
  unwatch: 10,
  openSession: 11,
  renewSession: 12,
  closeSession: 13,
} as const;

/** A request as sent. fencingToken.value is a bigint, written as a JSON number. */
export interface Request {
  id?: string;
  commandType: number;
  key?: string;
  clientId?: string;
  ttl?: number;
  value?: string;
  lockToken?: string;
  fencingToken?: { key: string; value: bigint };
  ack?: boolean;
  releaseOnDisconnect?: boolean;
  target?: string;
  waitMs?: number;
  /** "shared" for a read lock or a semaphore permit; absent: exclusive. */
  mode?: string;
  /** A semaphore of this many permits. */
  permits?: number;
  lockDelayMs?: number;
  /** acquireAll / tryAcquireAll (7, 8). */
  keys?: string[];
  /** The session an acquire puts its lease in, or the session of renewSession / closeSession (11–13). */
  sessionId?: string;
  /** watch (9): every key starting with key ("" for all). */
  prefix?: boolean;
}

/**
 * One lease of a "grants" reply, or one holder of an info's holders; a
 * {@link Reply} carries the same fields for its own key.
 */
export interface GrantInfo {
  key?: string;
  fencingToken?: bigint;
  lockToken?: string;
  ttl?: number;
  owner?: string;
  value?: string;
  expiresIn?: number;
  /** How a grant, an info's key or an event's holder holds the key; absent for exclusive. */
  mode?: string;
  permits?: number;
  wanted?: boolean;
  /** A grant in a session, or a session reply (session, sessionRenewed, sessionClosed). */
  sessionId?: string;
}

/** A reply or push as decoded: every fencing token is a bigint. */
export interface Reply extends GrantInfo {
  id?: string;
  type: string;
  success?: boolean;
  waiters?: number;
  /** The change an "event" message reports, and its revision. */
  event?: string;
  revision?: number;
  /** An info of a shared key: every holder, oldest grant first. */
  holders?: GrantInfo[];
  /** "grants": one lease per key of the acquireAll, in order. */
  leases?: GrantInfo[];
  error?: { code: string; message?: string; leader?: LeaderInfo; holder?: HolderInfo; retryIn?: number; feature?: string; quota?: string };
}

// Limits shared with the server (lock/validate.go).
export const MaxKeyLen = 256;
export const MaxOwnerLen = 128;
export const MaxValueLen = 4096;
export const MinTtlMs = 10;
export const MaxTtlMs = 24 * 60 * 60 * 1000;
export const DefaultTtlMs = 20_000;
export const MaxPermits = 65536;
export const MaxLockDelayMs = 60_000;
export const MaxMultiKeys = 64;

const utf8 = new TextEncoder();

/**
 * parseToken reads a fencing token in any shape a server sends: v1's
 * `{key, value}`, or a bare number (older servers), or a numeric string;
 * numbers beyond 2^53 arrive as strings from {@link decodeReply}, so the
 * bigint is exact. Returns undefined for absent or malformed tokens.
 */
export function parseToken(t: unknown): bigint | undefined {
  if (t !== null && typeof t === "object") return parseToken((t as { value?: unknown }).value);
  if (typeof t === "bigint") return t >= 0n ? t : undefined;
  if (typeof t === "number") return Number.isSafeInteger(t) && t >= 0 ? BigInt(t) : undefined;
  if (typeof t === "string" && /^\d{1,20}$/.test(t)) return BigInt(t);
  return undefined;
}

/**
 * decodeReply parses one text frame. Numbers of `value` and `fencingToken`
 * fields are turned into strings before JSON.parse so that 64-bit tokens
 * keep every digit: the pattern cannot match inside a JSON string, where
 * every quote is escaped.
 */
export function decodeReply(text: string): Reply {
  const exact = text.replace(/"(value|fencingToken)"(\s*):(\s*)(-?\d+)(?=\s*[,}])/g, '"$1"$2:$3"$4"');
  const m = JSON.parse(exact) as Record<string, unknown>;
  if (m === null || typeof m !== "object" || Array.isArray(m)) throw new SyntaxError("not a JSON object");
  const r = m as unknown as Reply & { fencingToken?: unknown };
  const out: Reply = { ...r, fencingToken: parseToken(r.fencingToken) };
  if (out.fencingToken === undefined) delete out.fencingToken;
  const holder = r.error?.holder as (HolderInfo & { fencingToken?: unknown; expiresIn?: number }) | undefined;
  if (holder) {
    const h: HolderInfo = {};
    if (holder.owner !== undefined) h.owner = holder.owner;
    const tok = parseToken(holder.fencingToken);
    if (tok !== undefined) h.fencingToken = tok;
    if (typeof holder.expiresIn === "number") h.expiresInMs = holder.expiresIn;
    out.error = { ...r.error!, holder: h };
  }
  if (typeof out.value !== "string") delete out.value; // a numeric value field would be some other server's
  for (const f of ["leases", "holders"] as const) {
    const list = (m as Record<string, unknown>)[f];
    if (!Array.isArray(list)) continue;
    out[f] = list.map((g: Record<string, unknown>) => {
      const x = { ...g, fencingToken: parseToken(g?.fencingToken) } as GrantInfo;
      if (x.fencingToken === undefined) delete x.fencingToken;
      if (typeof x.value !== "string") delete x.value;
      return x;
    });
  }
  return out;
}

/**
 * encodeRequest writes a request as JSON with the fencing token's value as
 * an exact number (JSON.stringify cannot write a bigint): the token is
 * spliced in as the last field.
 */
export function encodeRequest(req: Request): string {
  const { fencingToken, ...rest } = req;
  const s = JSON.stringify(rest);
  if (!fencingToken) return s;
  const tok = `"fencingToken":{"key":${JSON.stringify(fencingToken.key)},"value":${BigInt(fencingToken.value).toString()}}`;
  return s.length > 2 ? `${s.slice(0, -1)},${tok}}` : `{${tok}}`;
}

/** checkKey throws invalid_key as the server would: 1–256 bytes, no control characters. */
export function checkKey(key: string): void {
  if (typeof key !== "string" || key === "") throw new LockgateError("invalid_key", "lockgate: key must not be empty");
  const n = utf8.encode(key).length;
  if (n > MaxKeyLen) throw new LockgateError("invalid_key", `lockgate: key is ${n} bytes, longer than the maximum of ${MaxKeyLen}`);
  if (/[\u0000-\u001f\u007f-\u009f]/.test(key)) throw new LockgateError("invalid_key", "lockgate: key contains a control character");
  if (/\p{Cs}/u.test(key)) throw new LockgateError("invalid_key", "lockgate: key is not valid UTF-8 (a lone surrogate)");
}

/** checkTtl throws invalid_ttl for an explicit TTL outside 10 ms … 24 h (or not an integer). */
export function checkTtl(ttlMs: number): void {
  if (!Number.isInteger(ttlMs) || ttlMs < MinTtlMs || ttlMs > MaxTtlMs) {
    throw new LockgateError("invalid_ttl", `lockgate: ttlMs ${ttlMs} is not an integer within ${MinTtlMs} ms … ${MaxTtlMs} ms`);
  }
}

/** checkValue throws invalid_value for a value over 4096 bytes. */
export function checkValue(value: string): void {
  const n = utf8.encode(value).length;
  if (n > MaxValueLen) throw new LockgateError("invalid_value", `lockgate: value is ${n} bytes, longer than the maximum of ${MaxValueLen}`);
}

/** checkOwner throws invalid_owner for a client id over 128 bytes or with control characters. */
export function checkOwner(owner: string): void {
  if (utf8.encode(owner).length > MaxOwnerLen || /[\u0000-\u001f\u007f-\u009f]/.test(owner)) {
    throw new LockgateError("invalid_owner", `lockgate: clientId must be at most ${MaxOwnerLen} bytes without control characters`);
  }
}

/** checkPrimitives throws invalid_mode, invalid_permits or invalid_lock_delay as the server would. */
export function checkPrimitives(mode: string | undefined, permits: number | undefined, lockDelayMs: number | undefined): void {
  if (mode !== undefined && mode !== "exclusive" && mode !== "shared") {
    throw new LockgateError("invalid_mode", `lockgate: mode ${JSON.stringify(mode)} is neither "exclusive" nor "shared"`);
  }
  if (permits !== undefined && (!Number.isInteger(permits) || permits < 0 || permits > MaxPermits)) {
    throw new LockgateError("invalid_permits", `lockgate: permits ${permits} is not an integer within 0 … ${MaxPermits}`);
  }
  if (lockDelayMs !== undefined && (!Number.isInteger(lockDelayMs) || lockDelayMs < 0 || lockDelayMs > MaxLockDelayMs)) {
    throw new LockgateError("invalid_lock_delay", `lockgate: lockDelayMs ${lockDelayMs} is not an integer within 0 … ${MaxLockDelayMs}`);
  }
}

/** checkKeys throws invalid_keys for an empty list, more than 64 keys or a key listed twice, and invalid_key for a malformed key. */
export function checkKeys(keys: readonly string[]): void {
  if (!Array.isArray(keys) || keys.length === 0 || keys.length > MaxMultiKeys) {
    throw new LockgateError("invalid_keys", `lockgate: keys must list 1 … ${MaxMultiKeys} keys`);
  }
  const seen = new Set<string>();
  for (const k of keys) {
    checkKey(k);
    if (seen.has(k)) throw new LockgateError("invalid_keys", `lockgate: key ${JSON.stringify(k)} is listed twice`);
    seen.add(k);
  }
}

/** newHandle returns a fresh client-chosen lock token: 128 random bits as 32 lowercase hex digits. */
export function newHandle(): string {
  const b = new Uint8Array(16);
  globalThis.crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** base64url without padding, of a UTF-8 string (the bearer subprotocol). */
export function base64url(s: string): string {
  let bin = "";
  for (const byte of utf8.encode(s)) bin += String.fromCharCode(byte);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
