/**
 * Leases on the client's side: acquire, renew, release and inspect, the
 * lease cache's hooks, and the live leases the gateway's "wanted" pushes
 * are matched against. Every acquire carries a client-chosen lockToken, so
 * that on raftlock a re-sent copy that was already granted returns that
 * grant instead of queueing behind it.
 */
import { CancelledError, LockgateError, NotHeldError, TimeoutError } from "./errors.js";
import { newCall, closedError } from "./calls.js";
import { LeaseCache } from "./cache.js";
import { Lease } from "./lease.js";
import { prepare, primitiveFields } from "./primitives.js";
import { Outside } from "./sessions.js";
import { BackoffBaseMs, needsEarlyRenew, now } from "./timing.js";
import { Cmd, checkKey, checkTtl, newHandle } from "./wire.js";
/** The #held map's key: raftlock gives every lease of an acquireAll the same lock token. */
export function heldKey(key, lockToken) {
    return lockToken + "\u0000" + key;
}
/** The leases of a Client. @internal */
export class Leases {
    env;
    calls;
    conns;
    sessions;
    clientId;
    // Live leases by lock token, for "wanted" pushes; lock tokens of acquires
    // in flight (true once a push came for one).
    held = new Map();
    early = new Map();
    ops;
    cache;
    constructor(env, calls, conns, sessions, clientId, cache) {
        this.env = env;
        this.calls = calls;
        this.conns = conns;
        this.sessions = sessions;
        this.clientId = clientId;
        this.ops = {
            renew: (lease, ttlMs, signal) => this.env.track(this.renew(lease.key, lease.lockToken, lease.fencingToken, ttlMs, signal)),
            release: (lease) => this.env.track(this.releaseOrKeep(lease)),
            untrack: (lease) => {
                const hk = heldKey(lease.key, lease.lockToken);
                if (this.held.get(hk) === lease)
                    this.held.delete(hk);
            },
        };
        if (cache) {
            this.cache = new LeaseCache({
                releaseQuietly: (lease) => this.releaseQuietly(lease),
                log: (m) => this.env.log(m),
            }, cache.idleMs, cache.max);
        }
    }
    async acquire(key, opts, wait) {
        if (this.env.closed())
            throw closedError();
        checkKey(key);
        const p = prepare(opts, this.clientId);
        const { owner, ttlMs, autoRenew } = p;
        opts.signal?.throwIfAborted();
        // Only plain exclusive leases without lock-delay are cached (as the Go
        // SDK), and not those of a session given by the caller: an acquire of
        // another kind gives up a kept lease of its key.
        const cache = this.cache;
        const plain = p.needs.length === 0 && opts.session === undefined;
        const ck = { owner, ttlMs, value: opts.value, autoRenew, releaseOnDisconnect: !!opts.releaseOnDisconnect };
        if (cache && plain) {
            const { hit, stale } = cache.take(key, ck);
            if (hit)
                return hit;
            if (stale)
                await this.releaseQuietly(stale); // or this acquire would wait behind it
        }
        else if (cache) {
            for (const stale of cache.evict([key]))
                await this.releaseQuietly(stale);
        }
        for (let gone = 0;;) {
            const chosen = await this.sessions.sessionFor(opts, p);
            const session = chosen === Outside ? undefined : chosen;
            const lp = chosen === Outside ? this.sessions.outside(p) : p;
            const handle = newHandle();
            this.early.set(handle, false);
            try {
                const req = { commandType: wait ? Cmd.acquire : Cmd.tryAcquire, key, clientId: owner, ttl: lp.ttlMs, lockToken: handle };
                if (opts.value !== undefined)
                    req.value = opts.value;
                if (opts.releaseOnDisconnect)
                    req.releaseOnDisconnect = true;
                if (wait && opts.waitMs !== undefined)
                    req.waitMs = opts.waitMs;
                primitiveFields(req, p);
                this.sessions.sessionFields(req, session);
                const k = newCall(wait ? "acquire" : "try-acquire", req, { wait, grantable: true, needs: session ? [...p.needs, "sessions"] : p.needs });
                const r = await this.runAcquire(k, opts, wait, JSON.stringify(key));
                if (this.sessions.sessionGone(r, k, opts, session, gone++))
                    continue;
                if (r.type !== "grant")
                    throw this.calls.unexpected(r, k, "grant");
                const lease = await this.lease(r, key, lp, k.first, opts.value, session);
                if (lease) {
                    if (plain)
                        cache?.hold(lease, ck);
                    return lease;
                }
                if (!wait)
                    throw new NotHeldError(`lockgate: try-acquire ${JSON.stringify(key)}: the grant expired before it could be renewed`);
                this.env.log(`grant of ${key} expired on arrival; queueing again`);
            }
            finally {
                this.early.delete(handle);
            }
        }
    }
    /**
     * runAcquire runs an acquire's call: bounded by requestTimeoutMs for a
     * try, by waitMs (plus grace) for a timed wait, and given up when the
     * caller's signal aborts (CancelledError) or the client closes.
     */
    async runAcquire(k, opts, wait, what) {
        const req = k.req;
        if (req.waitMs !== undefined) {
            // A copy re-sent after a reconnect waits only for what is left.
            const waitMs = req.waitMs;
            k.onSend = (t) => (req.waitMs = Math.max(1, Math.round(waitMs - (t - k.first))));
        }
        const ctl = new AbortController();
        const stops = [];
        const stopOn = (s, reason) => {
            if (!s)
                return;
            const f = () => ctl.abort(reason());
            if (s.aborted)
                f();
            s.addEventListener("abort", f, { once: true });
            stops.push(() => s.removeEventListener("abort", f));
        };
        stopOn(opts.signal, () => new CancelledError(`lockgate: ${k.op} ${what}: cancelled by the caller`, opts.signal.reason));
        stopOn(this.env.closing, () => closedError());
        let timer;
        if (!wait) {
            timer = setTimeout(() => ctl.abort(this.calls.noAnswer(k)), this.env.requestTimeoutMs);
        }
        else if (opts.waitMs !== undefined) {
            // The server ends the wait at waitMs ("timeout"); this bound
            // covers a server that ignores waitMs, and time lost to reconnects.
            const grace = Math.min(2_000, 200 + opts.waitMs / 10);
            timer = setTimeout(() => ctl.abort(new TimeoutError(`lockgate: ${k.op} ${what}: not granted within waitMs ${opts.waitMs}`)), opts.waitMs + grace);
        }
        try {
            return await this.calls.do(k, ctl.signal);
        }
        finally {
            if (timer)
                clearTimeout(timer);
            for (const s of stops)
                s();
        }
    }
    /**
     * lease turns a grant into a Lease. sent is the send time of the first
     * copy of the acquire: the TTL started on the server after it. If less
     * than half the TTL is left of sent + ttl (a long wait), the lease is
     * renewed at once and the renewal's send time used. undefined when that
     * renewal found the lease gone.
     */
    async lease(r, key, p, sent, value, session) {
        if (!r.lockToken || r.fencingToken === undefined) {
            throw new LockgateError("unavailable", `lockgate: acquire ${JSON.stringify(key)}: grant without lockToken or fencingToken`);
        }
        // A grant in the session lives as long as the session: its deadline is
        // the session's. One that does not name the session (a gateway that
        // ignored sessionId) is an ordinary lease.
        const inSession = session && r.sessionId === session.id ? session : undefined;
        if (session && !inSession)
            this.env.log(`the grant of ${key} names no session; it renews itself`);
        if (inSession && !inSession.alive)
            return undefined; // the session ended while the acquire waited
        const ttl = r.ttl && r.ttl > 0 && r.ttl < p.ttlMs ? r.ttl : p.ttlMs;
        if (!inSession && needsEarlyRenew(sent, ttl, now())) {
            try {
                sent = await this.renew(key, r.lockToken, r.fencingToken, ttl);
            }
            catch (e) {
                if (e instanceof NotHeldError)
                    return undefined;
                this.env.log(`renewing a late grant of ${key} failed; its deadline stays short: ${e.message}`);
            }
        }
        const lease = new Lease(this.ops, {
            key,
            owner: r.owner || p.owner,
            lockToken: r.lockToken,
            fencingToken: r.fencingToken,
            ttlMs: ttl,
            sent,
            ...(value !== undefined ? { value } : {}),
            autoRenew: p.autoRenew && !this.env.closed(),
            wanted: !!r.wanted || this.early.get(r.lockToken) === true,
            mode: r.mode === "shared" ? "shared" : "exclusive",
            permits: typeof r.permits === "number" ? r.permits : 0,
            ...(inSession ? { session: inSession } : {}),
        });
        if (lease.reason === undefined)
            this.held.set(heldKey(key, lease.lockToken), lease);
        return lease;
    }
    /** releaseOrKeep is Lease.release: with the cache on, a lease nobody else wants is kept instead of released. */
    async releaseOrKeep(lease) {
        if (this.cache && !this.env.closed() && this.cache.put(lease, this.conns.signalsWanted))
            return;
        return this.release(lease);
    }
    /** releaseQuietly releases for real a lease the cache gave up; a failure is logged (the lease then ends at its TTL). */
    async releaseQuietly(lease) {
        try {
            await this.env.track(this.release(lease));
        }
        catch (e) {
            this.env.log(`releasing a cached lease of ${lease.key} failed; it ends at its TTL: ${e.message}`);
        }
    }
    /** renew extends (key, lockToken) to ttlMs; resolves with the answered copy's send time; NotHeldError when not held. */
    async renew(key, lockToken, token, ttlMs, signal) {
        if (this.env.closed())
            throw closedError();
        checkTtl(ttlMs);
        // During an election the retries must not sleep past the lease's
        // deadline: ttl/10 between them, as between the attempts of auto-renew.
        const k = newCall("renew", { commandType: Cmd.renew, key, lockToken, fencingToken: { key, value: token }, ttl: ttlMs }, {
            maxBackoffMs: Math.max(BackoffBaseMs, ttlMs / 10),
        });
        const r = await this.calls.oneShot(k, signal);
        if (r.type === "renewed")
            return k.last;
        throw this.calls.unexpected(r, k, "renewed");
    }
    /**
     * release frees the lease on the gateway. A re-sent release answered
     * not_held, whose earlier copy may have arrived (its connection dropped
     * before the answer), counts as released when the lease was alive by our
     * clock as the answered copy went out: nothing else can have freed it.
     */
    async release(lease) {
        if (this.env.closed())
            throw closedError();
        let alive = false;
        const k = newCall("release", { commandType: Cmd.release, key: lease.key, lockToken: lease.lockToken, fencingToken: { key: lease.key, value: lease.fencingToken }, ack: true }, { onSend: (t) => (alive = lease.reason === undefined && t < lease.deadline) });
        const r = await this.calls.oneShot(k);
        if (r.type === "released") {
            lease._end("released");
            return;
        }
        if (r.error?.code === "not_held") {
            if (k.prior && alive) {
                lease._end("released");
                return;
            }
            if (k.prior) {
                lease._end("not_held");
                throw new LockgateError("unavailable", `lockgate: release ${JSON.stringify(lease.key)}: outcome unknown: the re-sent copy was answered not_held after the lease's deadline`);
            }
            lease._end("not_held");
        }
        throw this.calls.unexpected(r, k, "released");
    }
    async inspect(key, signal) {
        if (this.env.closed())
            throw closedError();
        checkKey(key);
        const k = newCall("inspect", { commandType: Cmd.inspect, key });
        const r = await this.calls.oneShot(k, signal);
        if (r.error?.code === "not_found")
            return null;
        if (r.type !== "info")
            throw this.calls.unexpected(r, k, "info");
        return {
            key,
            owner: r.owner ?? "",
            fencingToken: r.fencingToken,
            value: r.value,
            expiresInMs: r.expiresIn,
            waiters: typeof r.waiters === "number" ? r.waiters : -1,
            mode: r.mode === "shared" ? "shared" : "exclusive",
            permits: typeof r.permits === "number" ? r.permits : 0,
            holders: (r.holders ?? []).map((h) => ({ owner: h.owner ?? "", fencingToken: h.fencingToken, value: h.value, expiresInMs: h.expiresIn })),
        };
    }
    onWanted(r) {
        if (!r.lockToken)
            return;
        const lease = this.held.get(heldKey(r.key ?? "", r.lockToken));
        if (lease)
            lease._markWanted();
        else if (this.early.has(r.lockToken))
            this.early.set(r.lockToken, true);
    }
}
