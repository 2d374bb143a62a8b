/**
 * The primitives beyond one exclusive lock: an acquire's mode, permits and
 * lock-delay (checked, and the gateway features they need), and
 * acquireAll / tryAcquireAll (every key at once, all or nothing; the
 * gateway's "multikey" feature).
 */
import { LockgateError, NotHeldError } from "./errors.js";
import { closedError, newCall } from "./calls.js";
import { Outside } from "./sessions.js";
import { Cmd, DefaultTtlMs, checkKeys, checkOwner, checkPrimitives, checkTtl, checkValue, newHandle } from "./wire.js";
/** prepare checks an acquire's options as the server would and normalizes them. */
export function prepare(opts, clientId) {
    if (opts.ttlMs !== undefined)
        checkTtl(opts.ttlMs);
    if (opts.value !== undefined)
        checkValue(opts.value);
    const owner = opts.clientId ?? clientId;
    checkOwner(owner);
    if (opts.waitMs !== undefined && (!Number.isInteger(opts.waitMs) || opts.waitMs < 0)) {
        throw new LockgateError("invalid_wait", `lockgate: waitMs ${opts.waitMs} is not a non-negative integer`);
    }
    checkPrimitives(opts.mode, opts.permits, opts.lockDelayMs);
    const permits = opts.permits ?? 0;
    const mode = permits > 0 ? "shared" : (opts.mode ?? "exclusive"); // a permit is a shared hold
    const lockDelayMs = opts.lockDelayMs ?? 0;
    const needs = [];
    if (permits > 0)
        needs.push("semaphore");
    else if (mode === "shared")
        needs.push("shared");
    if (lockDelayMs > 0)
        needs.push("lockdelay");
    return { owner, ttlMs: opts.ttlMs ?? DefaultTtlMs, autoRenew: opts.autoRenew ?? opts.ttlMs === undefined, mode, permits, lockDelayMs, needs };
}
/** primitiveFields sets the request's mode, permits and lockDelayMs (absent when default, as the Go SDK sends them). */
export function primitiveFields(req, p) {
    if (p.mode === "shared")
        req.mode = "shared";
    if (p.permits > 0)
        req.permits = p.permits;
    if (p.lockDelayMs > 0)
        req.lockDelayMs = p.lockDelayMs;
}
/**
 * acquireAll is acquireAll (wait) and tryAcquireAll: one "grants" reply
 * with a lease per key, in order, or nothing held. A grant one of whose
 * leases cannot be used (it expired on arrival) is given back whole.
 */
export async function acquireAll(l, keys, opts, wait) {
    if (l.env.closed())
        throw closedError();
    checkKeys(keys);
    const p = prepare(opts, l.clientId);
    opts.signal?.throwIfAborted();
    keys = [...keys];
    const what = JSON.stringify(keys);
    // Never cached; an unused cached lease of one of the keys would hold it against us.
    if (l.cache)
        for (const stale of l.cache.evict(keys))
            await l.releaseQuietly(stale);
    for (let gone = 0;;) {
        const chosen = await l.sessions.sessionFor(opts, p);
        const session = chosen === Outside ? undefined : chosen;
        const lp = chosen === Outside ? l.sessions.outside(p) : p;
        const handle = newHandle();
        l.early.set(handle, false);
        try {
            const req = { commandType: wait ? Cmd.acquireAll : Cmd.tryAcquireAll, keys, clientId: lp.owner, ttl: lp.ttlMs, lockToken: handle };
            if (opts.value !== undefined)
                req.value = opts.value;
            if (wait && opts.waitMs !== undefined)
                req.waitMs = opts.waitMs;
            primitiveFields(req, p);
            l.sessions.sessionFields(req, session);
            const needs = ["multikey", ...p.needs, ...(session ? ["sessions"] : [])];
            const k = newCall(wait ? "acquire-all" : "try-acquire-all", req, { wait, grantable: true, needs });
            const r = await l.runAcquire(k, opts, wait, what);
            if (l.sessions.sessionGone(r, k, opts, session, gone++))
                continue;
            if (r.type !== "grants")
                throw l.calls.unexpected(r, k, "grants");
            const got = r.leases ?? [];
            const leases = [];
            let lost;
            let expired = false;
            if (got.length !== keys.length) {
                lost = new LockgateError("unavailable", `lockgate: ${k.op} ${what}: ${got.length} leases for ${keys.length} keys`);
            }
            for (let i = 0; !lost && i < got.length; i++) {
                const g = got[i];
                if (g.key !== keys[i]) {
                    lost = new LockgateError("unavailable", `lockgate: ${k.op} ${what}: lease ${i} is for ${JSON.stringify(g.key)}, not ${JSON.stringify(keys[i])}`);
                    break;
                }
                const lease = await l.lease({ ...g, type: "grant" }, keys[i], lp, k.first, opts.value, session);
                if (!lease) {
                    expired = true;
                    lost = new NotHeldError(`lockgate: ${k.op} ${what}: the grant of ${JSON.stringify(keys[i])} expired before it could be renewed`);
                    break;
                }
                leases.push(lease);
            }
            if (!lost)
                return leases;
            // All or nothing: give back what this grant gave.
            for (const lease of leases)
                await l.release(lease).catch(() => { });
            const conn = l.conns.conn;
            for (const g of got.slice(leases.length + (expired ? 1 : 0))) {
                if (g.key && g.lockToken)
                    await l.calls.releaseRaced(conn, { type: "grant", key: g.key, lockToken: g.lockToken, fencingToken: g.fencingToken ?? 0n });
            }
            if (!(expired && wait))
                throw lost;
            l.env.log(`a grant of ${what} expired on arrival; queueing again`);
        }
        finally {
            l.early.delete(handle);
        }
    }
}
