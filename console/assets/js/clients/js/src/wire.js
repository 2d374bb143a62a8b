/**
 * The WebSocket protocol's messages (docs/protocol.md): encoding requests,
 * decoding replies with exact fencing tokens, and the client-side checks
 * that mirror the server's (so a bad key fails before a round trip).
 */
import { LockgateError } from "./errors.js";
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
};
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
export function parseToken(t) {
    if (t !== null && typeof t === "object")
        return parseToken(t.value);
    if (typeof t === "bigint")
        return t >= 0n ? t : undefined;
    if (typeof t === "number")
        return Number.isSafeInteger(t) && t >= 0 ? BigInt(t) : undefined;
    if (typeof t === "string" && /^\d{1,20}$/.test(t))
        return BigInt(t);
    return undefined;
}
/**
 * decodeReply parses one text frame. Numbers of `value` and `fencingToken`
 * fields are turned into strings before JSON.parse so that 64-bit tokens
 * keep every digit: the pattern cannot match inside a JSON string, where
 * every quote is escaped.
 */
export function decodeReply(text) {
    const exact = text.replace(/"(value|fencingToken)"(\s*):(\s*)(-?\d+)(?=\s*[,}])/g, '"$1"$2:$3"$4"');
    const m = JSON.parse(exact);
    if (m === null || typeof m !== "object" || Array.isArray(m))
        throw new SyntaxError("not a JSON object");
    const r = m;
    const out = { ...r, fencingToken: parseToken(r.fencingToken) };
    if (out.fencingToken === undefined)
        delete out.fencingToken;
    const holder = r.error?.holder;
    if (holder) {
        const h = {};
        if (holder.owner !== undefined)
            h.owner = holder.owner;
        const tok = parseToken(holder.fencingToken);
        if (tok !== undefined)
            h.fencingToken = tok;
        if (typeof holder.expiresIn === "number")
            h.expiresInMs = holder.expiresIn;
        out.error = { ...r.error, holder: h };
    }
    if (typeof out.value !== "string")
        delete out.value; // a numeric value field would be some other server's
    for (const f of ["leases", "holders"]) {
        const list = m[f];
        if (!Array.isArray(list))
            continue;
        out[f] = list.map((g) => {
            const x = { ...g, fencingToken: parseToken(g?.fencingToken) };
            if (x.fencingToken === undefined)
                delete x.fencingToken;
            if (typeof x.value !== "string")
                delete x.value;
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
export function encodeRequest(req) {
    const { fencingToken, ...rest } = req;
    const s = JSON.stringify(rest);
    if (!fencingToken)
        return s;
    const tok = `"fencingToken":{"key":${JSON.stringify(fencingToken.key)},"value":${BigInt(fencingToken.value).toString()}}`;
    return s.length > 2 ? `${s.slice(0, -1)},${tok}}` : `{${tok}}`;
}
/** checkKey throws invalid_key as the server would: 1–256 bytes, no control characters. */
export function checkKey(key) {
    if (typeof key !== "string" || key === "")
        throw new LockgateError("invalid_key", "lockgate: key must not be empty");
    const n = utf8.encode(key).length;
    if (n > MaxKeyLen)
        throw new LockgateError("invalid_key", `lockgate: key is ${n} bytes, longer than the maximum of ${MaxKeyLen}`);
    if (/[\u0000-\u001f\u007f-\u009f]/.test(key))
        throw new LockgateError("invalid_key", "lockgate: key contains a control character");
    if (/\p{Cs}/u.test(key))
        throw new LockgateError("invalid_key", "lockgate: key is not valid UTF-8 (a lone surrogate)");
}
/** checkTtl throws invalid_ttl for an explicit TTL outside 10 ms … 24 h (or not an integer). */
export function checkTtl(ttlMs) {
    if (!Number.isInteger(ttlMs) || ttlMs < MinTtlMs || ttlMs > MaxTtlMs) {
        throw new LockgateError("invalid_ttl", `lockgate: ttlMs ${ttlMs} is not an integer within ${MinTtlMs} ms … ${MaxTtlMs} ms`);
    }
}
/** checkValue throws invalid_value for a value over 4096 bytes. */
export function checkValue(value) {
    const n = utf8.encode(value).length;
    if (n > MaxValueLen)
        throw new LockgateError("invalid_value", `lockgate: value is ${n} bytes, longer than the maximum of ${MaxValueLen}`);
}
/** checkOwner throws invalid_owner for a client id over 128 bytes or with control characters. */
export function checkOwner(owner) {
    if (utf8.encode(owner).length > MaxOwnerLen || /[\u0000-\u001f\u007f-\u009f]/.test(owner)) {
        throw new LockgateError("invalid_owner", `lockgate: clientId must be at most ${MaxOwnerLen} bytes without control characters`);
    }
}
/** checkPrimitives throws invalid_mode, invalid_permits or invalid_lock_delay as the server would. */
export function checkPrimitives(mode, permits, lockDelayMs) {
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
export function checkKeys(keys) {
    if (!Array.isArray(keys) || keys.length === 0 || keys.length > MaxMultiKeys) {
        throw new LockgateError("invalid_keys", `lockgate: keys must list 1 … ${MaxMultiKeys} keys`);
    }
    const seen = new Set();
    for (const k of keys) {
        checkKey(k);
        if (seen.has(k))
            throw new LockgateError("invalid_keys", `lockgate: key ${JSON.stringify(k)} is listed twice`);
        seen.add(k);
    }
}
/** newHandle returns a fresh client-chosen lock token: 128 random bits as 32 lowercase hex digits. */
export function newHandle() {
    const b = new Uint8Array(16);
    globalThis.crypto.getRandomValues(b);
    return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}
/** base64url without padding, of a UTF-8 string (the bearer subprotocol). */
export function base64url(s) {
    let bin = "";
    for (const byte of utf8.encode(s))
        bin += String.fromCharCode(byte);
    return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
