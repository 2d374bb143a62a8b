/**
 * Client: a lockgate client over the WebSocket protocol (docs/protocol.md,
 * v1), the TypeScript counterpart of the Go SDK (client/).
 *
 * One WebSocket connection carries every request, multiplexed by id. It is
 * opened on demand to a random endpoint and replaced when it fails:
 * not_leader with the leader's address moves it there (at most maxHops
 * hops per request), `closed` and a connection that drops move it
 * elsewhere with backoff (50 ms doubling to 2 s, full jitter), and every
 * request that was waiting on it is re-sent — an acquire with the same
 * client-chosen lockToken, so that on raftlock a copy that was already
 * granted returns that grant instead of queueing behind it.
 */
import { CancelledError, LockgateError, NotHeldError, SessionExpiredError, TimeoutError, UnsupportedError, errorFromReply, } from "./errors.js";
import { Conn } from "./conn.js";
import { DefaultCacheIdleMs, DefaultMaxCachedLeases, LeaseCache } from "./cache.js";
import { Lease } from "./lease.js";
import { Session } from "./session.js";
import { Watch, WatchBuffer } from "./watch.js";
import { dial, wsUrl } from "./socket.js";
import { BackoffBaseMs, BackoffMaxMs, backoffMs, needsEarlyRenew, now } from "./timing.js";
import { Cmd, DefaultTtlMs, checkKey, checkKeys, checkOwner, checkPrimitives, checkTtl, checkValue, newHandle, } from "./wire.js";
/** Defaults of ClientOptions. */
export const DefaultDialTimeoutMs = 5_000;
export const DefaultRequestTimeoutMs = 10_000;
export const DefaultMaxHops = 5;
/** A redirect to an address whose dial failed less than this long ago is not followed. */
const DeadForMs = 1_000;
/** How long after a refused open of the client's own session its leases renew themselves before an acquire tries again (ClientOptions.sessionRetryMs). */
export const DefaultSessionRetryMs = 30_000;
/** Marks an acquire whose lease would have gone into the client's own session and renews itself instead. */
const Outside = Symbol("outside the session");
/** The #held map's key: raftlock gives every lease of an acquireAll the same lock token. */
function heldKey(key, lockToken) {
    return lockToken + "\u0000" + key;
}
function newCall(op, req, extra = {}) {
    return { op, req, sends: 0, first: 0, last: 0, prior: false, ...extra };
}
/** sleep waits ms; it rejects with the signal's reason when aborted first. */
function sleep(ms, signal) {
    return new Promise((resolve, reject) => {
        if (signal?.aborted)
            return reject(signal.reason);
        const t = setTimeout(() => {
            signal?.removeEventListener("abort", onAbort);
            resolve();
        }, ms);
        const onAbort = () => {
            clearTimeout(t);
            reject(signal.reason);
        };
        signal?.addEventListener("abort", onAbort, { once: true });
    });
}
/** abortable settles as p, or rejects with signal's reason when it aborts first. */
function abortable(p, signal) {
    if (signal.aborted)
        return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
        const onAbort = () => reject(signal.reason);
        signal.addEventListener("abort", onAbort, { once: true });
        p.then((v) => {
            signal.removeEventListener("abort", onAbort);
            resolve(v);
        }, (e) => {
            signal.removeEventListener("abort", onAbort);
            reject(e);
        });
    });
}
export class Client {
    clientId;
    #endpoints;
    #secure;
    #requestTimeoutMs;
    #dialTimeoutMs;
    #maxHops;
    #tls;
    #token;
    #webSocket;
    #log;
    #closed = false;
    #closeDone;
    #closing = new AbortController(); // aborted by close(): waits give up, reconnects stop
    #nextId = 0;
    #conn;
    #connecting;
    #next = ""; // a redirect target, dialled next without backoff
    #avoid = ""; // the gateway that just failed us
    #attempt = 0; // consecutive failed connects
    #dead = new Map(); // addresses whose last dial failed, and when
    #dialErr;
    #calls = new Set();
    // Live leases by lock token, for "wanted" pushes; lock tokens of acquires
    // in flight (true once a push came for one).
    #held = new Map();
    #early = new Map();
    #ops;
    // What the last gateway announced (Lockgate-Features: wanted); the lease
    // cache keeps leases only when it did.
    #signalsWanted = false;
    #cache;
    // Sessions: the client's own (opened on first use), an open of it under
    // way, every live session this client opened, and the connection on which
    // the gateway was found to offer none.
    #useSessions;
    #sessionTtlMs;
    #sessionOps;
    #sessions = new Set();
    #ownSession;
    #ownOpening;
    #noSessionsOn;
    // A refused open of the client's own session: none is asked for before
    // #ownRetryAt; #fallingBack from the refusal until one opens (warned
    // once); what became of the session, for sessionStats().
    #sessionRetryMs;
    #ownRetryAt = 0;
    #fallingBack = false;
    #sessionCounts = { opened: 0, refused: 0, fallbacks: 0 };
    #warn;
    constructor(endpoints, opts = {}) {
        const list = typeof endpoints === "string" ? endpoints.split(",").map((s) => s.trim()).filter(Boolean) : [...endpoints];
        if (list.length === 0)
            throw new LockgateError("bad_json", "lockgate: no endpoints");
        // TLS is all or nothing: a bare host:port (and every redirect, which
        // names a bare address) is dialled as wss:// when any endpoint is.
        let secure = !!opts.tls;
        for (const e of list)
            secure ||= wsUrl(e, false).startsWith("wss:");
        for (const e of list) {
            if (secure && !wsUrl(e, true).startsWith("wss:")) {
                throw new LockgateError("bad_json", `lockgate: endpoint ${JSON.stringify(e)} is plaintext while the client speaks TLS`);
            }
        }
        this.clientId = opts.clientId ?? "js-" + newHandle().slice(0, 12);
        checkOwner(this.clientId);
        this.#endpoints = list;
        this.#secure = secure;
        this.#requestTimeoutMs = opts.requestTimeoutMs ?? DefaultRequestTimeoutMs;
        this.#dialTimeoutMs = opts.dialTimeoutMs ?? DefaultDialTimeoutMs;
        this.#maxHops = opts.maxHops ?? DefaultMaxHops;
        this.#tls = typeof opts.tls === "object" ? opts.tls : undefined;
        this.#token = opts.token;
        this.#webSocket = opts.webSocket;
        this.#log = opts.logger ?? (() => { });
        this.#warn = opts.logger ?? ((m) => console.warn(m));
        this.#ops = {
            renew: (lease, ttlMs, signal) => this.#track(this.#renew(lease.key, lease.lockToken, lease.fencingToken, ttlMs, signal)),
            release: (lease) => this.#track(this.#releaseOrKeep(lease)),
            untrack: (lease) => {
                const hk = heldKey(lease.key, lease.lockToken);
                if (this.#held.get(hk) === lease)
                    this.#held.delete(hk);
            },
        };
        this.#useSessions = (opts.sessions ?? true) && !opts.cacheLeases;
        if (opts.sessionTtlMs !== undefined)
            checkTtl(opts.sessionTtlMs);
        this.#sessionTtlMs = opts.sessionTtlMs;
        this.#sessionRetryMs = opts.sessionRetryMs ?? DefaultSessionRetryMs;
        if (!(this.#sessionRetryMs >= 0))
            throw new LockgateError("bad_json", `lockgate: sessionRetryMs ${opts.sessionRetryMs} is not a non-negative number`);
        this.#sessionOps = {
            renew: (s, signal) => this.#track(this.#renewSession(s, signal)),
            close: (s) => this.#track(this.#closeSession(s)),
            forget: (s) => {
                this.#sessions.delete(s);
                if (this.#ownSession === s)
                    this.#ownSession = undefined;
            },
        };
        if (opts.cacheLeases) {
            const idle = opts.cacheIdleMs ?? DefaultCacheIdleMs;
            const max = opts.maxCachedLeases ?? DefaultMaxCachedLeases;
            if (!(idle > 0))
                throw new LockgateError("bad_json", `lockgate: cacheIdleMs ${idle} is not positive`);
            if (!Number.isInteger(max) || max < 0)
                throw new LockgateError("bad_json", `lockgate: maxCachedLeases ${max} is not a non-negative integer`);
            this.#cache = new LeaseCache({
                releaseQuietly: (lease) => this.#releaseQuietly(lease),
                log: (m) => this.#log(m),
            }, idle, max);
        }
    }
    /** What became of the client's own session (ClientOptions.sessions): all zero with sessions off or a gateway without them. */
    sessionStats() {
        return { ...this.#sessionCounts, fallingBack: this.#fallingBack };
    }
    /** What the lease cache did (ClientOptions.cacheLeases); all zero when it is off. */
    cacheStats() {
        return this.#cache?.stats() ?? { hits: 0, misses: 0, kept: 0, reclaimed: 0, idle: 0, unused: 0 };
    }
    /** Whether the gateway the client is (or was last) connected to announced "wanted" pushes; false before the first connection. */
    get signalsWanted() {
        return this.#signalsWanted;
    }
    /** The address of the gateway the client is connected to (after redirects: the leader's), or "" while it is not. */
    get endpoint() {
        return this.#conn && !this.#conn.closed ? this.#conn.addr : "";
    }
    /**
     * acquire waits, across reconnects and leader changes, until the key is
     * granted. It fails with TimeoutError when waitMs runs out, with
     * CancelledError when opts.signal aborts (the wait is cancelled on the
     * gateway and a grant that raced in is released), and with a
     * LockgateError for invalid input or a closed client.
     */
    acquire(key, opts = {}) {
        return this.#track(this.#acquire(key, opts, true));
    }
    /** tryAcquire makes one attempt: a held key fails with HeldError naming the holder. */
    tryAcquire(key, opts = {}) {
        return this.#track(this.#acquire(key, opts, false));
    }
    /**
     * acquireAll waits until every key is granted at once (all or nothing;
     * needs the gateway's "multikey" feature) and returns one lease per key,
     * in the order of keys. Options, cancellation and waitMs as acquire's.
     * The leases are never kept by the lease cache.
     */
    acquireAll(keys, opts = {}) {
        return this.#track(this.#acquireAll(keys, opts, true));
    }
    /** tryAcquireAll makes one attempt at every key: a held key fails with HeldError and nothing is held. */
    tryAcquireAll(keys, opts = {}) {
        return this.#track(this.#acquireAll(keys, opts, false));
    }
    /**
     * openSession opens a session (needs the gateway's "sessions" feature):
     * leases acquired with `{ session }` live as long as it does, all renewed
     * by one keep-alive every ttl/3 (unless keepAlive is false). It is bounded
     * by requestTimeoutMs.
     */
    openSession(opts = {}) {
        return this.#track(this.#openSession(opts));
    }
    /** renewSession is one keep-alive of s; SessionExpiredError (and s ends, its leases "not_held") when the server no longer has it. */
    renewSession(s) {
        return s.renew();
    }
    /** closeSession ends s on the server: every lease in it is released. A session already gone gives SessionExpiredError (and ends here all the same). */
    closeSession(s) {
        return s.close();
    }
    /** The client's own session (ClientOptions.sessions) while it lives, else undefined. */
    get session() {
        return this.#ownSession;
    }
    /**
     * features is what the gateway announced in its upgrade's
     * Lockgate-Features (wanted, shared, semaphore, multikey, watch,
     * lockdelay), connecting first if the client has no connection (bounded
     * by requestTimeoutMs). undefined where the client cannot read the
     * header (a browser's WebSocket): there nothing is refused locally and
     * the gateway answers "unsupported" itself.
     */
    async features(opts = {}) {
        if (this.#closed)
            throw this.#closedError();
        const ctl = new AbortController();
        const t = setTimeout(() => {
            const why = this.#dialErr ? ` (last dial: ${this.#dialErr.message})` : "";
            ctl.abort(new LockgateError("unavailable", `lockgate: features: no connection within ${this.#requestTimeoutMs} ms${why}`));
        }, this.#requestTimeoutMs);
        const stop = AbortSignal.any([ctl.signal, this.#closing.signal, ...(opts.signal ? [opts.signal] : [])]);
        try {
            const conn = await this.#track(abortable(this.#getConn(), stop));
            return conn.featuresKnown ? [...conn.features] : undefined;
        }
        finally {
            clearTimeout(t);
        }
    }
    /**
     * watch streams key's holder changes (needs the gateway's "watch"
     * feature): first an event per current holder, then "synced", then
     * every grant, release and expiry as it happens. It resolves once the
     * gateway has accepted the watch. Iterate the Watch with `for await`;
     * the iteration ends quietly when opts.signal aborts or watch.close() is
     * called, and throws when the watch breaks: WatchOverflowError when it
     * fell behind, a LockgateError "unavailable" when its connection was
     * lost (a watch lives on one connection: watch again, the new watch
     * starts with the current holders).
     *
     * With opts.prefix it watches every key starting with key ("" for every
     * key; needs "watchprefix"): "synced" first, no holders, then each
     * change under the prefix with the event's own key.
     */
    watch(key, opts = {}) {
        return this.#track(this.#watch(key, opts));
    }
    /** inspect reports the holder of key, or null when nobody holds it. */
    inspect(key, opts = {}) {
        return this.#track(this.#inspect(key, opts.signal));
    }
    /**
     * close: waiting acquires cancel their waits on the gateway and fail with
     * code "closed", auto-renewals stop, later calls fail with "closed", and
     * the connection closes. Leases kept unused by the lease cache are
     * released first; leases in use stay held on the server until their TTL
     * unless released first. Idempotent.
     */
    close() {
        this.#closeDone ??= this.#close();
        return this.#closeDone;
    }
    async #close() {
        // The unused cached leases are released for real while calls still go out.
        // Each release is bounded by requestTimeoutMs.
        if (this.#cache)
            await this.#cache.close();
        this.#closed = true;
        for (const l of this.#held.values())
            l._stopRenewing();
        // As the Go SDK: the keep-alives stop, and the sessions' leases run out.
        for (const s of this.#sessions)
            s.stopKeepAlive();
        this.#closing.abort(new LockgateError("closed", "lockgate: the client is closed"));
        // Let the waits cancel themselves on the connection, bounded.
        const calls = Promise.allSettled([...this.#calls]);
        // The bound's timer is cleared: left running it kept Node's event loop alive for requestTimeoutMs after close.
        const bound = new AbortController();
        await Promise.race([calls, sleep(this.#requestTimeoutMs, bound.signal).catch(() => { })]);
        bound.abort();
        this.#conn?.close(new Error("client closed"), 1000);
    }
    #track(p) {
        this.#calls.add(p);
        const forget = () => this.#calls.delete(p);
        p.then(forget, forget);
        return p;
    }
    #newId() {
        return (++this.#nextId).toString(36);
    }
    #closedError() {
        return new LockgateError("closed", "lockgate: the client is closed");
    }
    // ---- acquire, renew, release, inspect ----
    async #watch(key, opts) {
        if (this.#closed)
            throw this.#closedError();
        const prefix = opts.prefix === true;
        if (!prefix || key !== "")
            checkKey(key); // a prefix is a key, or "" for every key
        opts.signal?.throwIfAborted();
        const what = `watch ${prefix ? "prefix " : ""}${JSON.stringify(key)}`;
        const ctl = new AbortController();
        const t = setTimeout(() => ctl.abort(new LockgateError("unavailable", `lockgate: ${what}: not established within ${this.#requestTimeoutMs} ms`)), this.#requestTimeoutMs);
        const stop = [this.#closing.signal, ...(opts.signal ? [opts.signal] : [])];
        const onStop = () => ctl.abort(opts.signal?.aborted ? new CancelledError(`lockgate: ${what}: cancelled by the caller`, opts.signal.reason) : this.#closedError());
        for (const s of stop)
            s.addEventListener("abort", onStop, { once: true });
        let hops = 0;
        let retry = 0;
        try {
            for (;;) {
                ctl.signal.throwIfAborted();
                const conn = await abortable(this.#getConn(), ctl.signal);
                if (conn.featuresKnown && !conn.features.includes("watch")) {
                    throw new UnsupportedError(`lockgate: ${what}: unsupported: the gateway ${conn.addr} does not offer "watch" (Lockgate-Features: ${conn.features.join(",") || "none"})`, "watch");
                }
                if (prefix && conn.featuresKnown && !conn.features.includes("watchprefix")) {
                    throw new UnsupportedError(`lockgate: ${what}: unsupported: the gateway ${conn.addr} does not offer "watchprefix" (Lockgate-Features: ${conn.features.join(",") || "none"})`, "watchprefix");
                }
                const id = this.#newId();
                const p = conn.register(id);
                if (!p)
                    continue;
                p.limit = WatchBuffer;
                const ops = {
                    unwatch: () => conn.send({ id: this.#newId(), commandType: Cmd.unwatch, target: id }),
                    forget: () => conn.unregister(id),
                };
                p.onOverflow = () => {
                    try {
                        ops.unwatch();
                    }
                    catch {
                        // the connection is gone
                    }
                };
                try {
                    conn.send(prefix ? { id, commandType: Cmd.watch, key, prefix: true } : { id, commandType: Cmd.watch, key });
                }
                catch {
                    conn.unregister(id);
                    continue;
                }
                let first;
                try {
                    first = await abortable(p.next(), ctl.signal);
                }
                catch (e) {
                    conn.unregister(id);
                    try {
                        ops.unwatch();
                    }
                    catch {
                        // the connection is gone
                    }
                    throw e;
                }
                if (first === null)
                    continue; // the connection dropped: watch again on the next
                if (first.type === "error") {
                    conn.unregister(id);
                    switch (first.error?.code) {
                        case "not_leader": {
                            let addr = first.error.leader?.addr ?? "";
                            if (addr && this.#isDead(addr))
                                addr = "";
                            if (addr && addr !== conn.addr && hops < this.#maxHops) {
                                hops++;
                                conn.closeFor(addr, false, new Error("not_leader"));
                                continue;
                            }
                            break;
                        }
                        case "closed":
                            conn.closeFor("", true, new Error("gateway closing"));
                            continue;
                        case "unavailable":
                            conn.strike();
                            break;
                        default:
                            throw errorFromReply(first.error, what);
                    }
                    await sleep(backoffMs(++retry), ctl.signal);
                    continue;
                }
                conn.good();
                return new Watch(key, first, p, ops, stop, prefix);
            }
        }
        finally {
            clearTimeout(t);
            for (const s of stop)
                s.removeEventListener("abort", onStop);
        }
    }
    /** #prepare checks an acquire's options as the server would and normalizes them. */
    #prepare(opts) {
        if (opts.ttlMs !== undefined)
            checkTtl(opts.ttlMs);
        if (opts.value !== undefined)
            checkValue(opts.value);
        const owner = opts.clientId ?? this.clientId;
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
    /** #primitiveFields sets the request's mode, permits and lockDelayMs (absent when default, as the Go SDK sends them). */
    #primitiveFields(req, p) {
        if (p.mode === "shared")
            req.mode = "shared";
        if (p.permits > 0)
            req.permits = p.permits;
        if (p.lockDelayMs > 0)
            req.lockDelayMs = p.lockDelayMs;
    }
    async #acquire(key, opts, wait) {
        if (this.#closed)
            throw this.#closedError();
        checkKey(key);
        const p = this.#prepare(opts);
        const { owner, ttlMs, autoRenew } = p;
        opts.signal?.throwIfAborted();
        // Only plain exclusive leases without lock-delay are cached (as the Go
        // SDK), and not those of a session given by the caller: an acquire of
        // another kind gives up a kept lease of its key.
        const cache = this.#cache;
        const plain = p.needs.length === 0 && opts.session === undefined;
        const ck = { owner, ttlMs, value: opts.value, autoRenew, releaseOnDisconnect: !!opts.releaseOnDisconnect };
        if (cache && plain) {
            const { hit, stale } = cache.take(key, ck);
            if (hit)
                return hit;
            if (stale)
                await this.#releaseQuietly(stale); // or this acquire would wait behind it
        }
        else if (cache) {
            for (const stale of cache.evict([key]))
                await this.#releaseQuietly(stale);
        }
        for (let gone = 0;;) {
            const chosen = await this.#sessionFor(opts, p);
            const session = chosen === Outside ? undefined : chosen;
            const lp = chosen === Outside ? this.#outside(p) : p;
            const handle = newHandle();
            this.#early.set(handle, false);
            try {
                const req = { commandType: wait ? Cmd.acquire : Cmd.tryAcquire, key, clientId: owner, ttl: lp.ttlMs, lockToken: handle };
                if (opts.value !== undefined)
                    req.value = opts.value;
                if (opts.releaseOnDisconnect)
                    req.releaseOnDisconnect = true;
                if (wait && opts.waitMs !== undefined)
                    req.waitMs = opts.waitMs;
                this.#primitiveFields(req, p);
                this.#sessionFields(req, session);
                const k = newCall(wait ? "acquire" : "try-acquire", req, { wait, grantable: true, needs: session ? [...p.needs, "sessions"] : p.needs });
                const r = await this.#runAcquire(k, opts, wait, JSON.stringify(key));
                if (this.#sessionGone(r, k, opts, session, gone++))
                    continue;
                if (r.type !== "grant")
                    throw this.#unexpected(r, k, "grant");
                const lease = await this.#lease(r, key, lp, k.first, opts.value, session);
                if (lease) {
                    if (plain)
                        cache?.hold(lease, ck);
                    return lease;
                }
                if (!wait)
                    throw new NotHeldError(`lockgate: try-acquire ${JSON.stringify(key)}: the grant expired before it could be renewed`);
                this.#log(`grant of ${key} expired on arrival; queueing again`);
            }
            finally {
                this.#early.delete(handle);
            }
        }
    }
    /**
     * #runAcquire runs an acquire's call: bounded by requestTimeoutMs for a
     * try, by waitMs (plus grace) for a timed wait, and given up when the
     * caller's signal aborts (CancelledError) or the client closes.
     */
    async #runAcquire(k, opts, wait, what) {
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
        stopOn(this.#closing.signal, () => this.#closedError());
        let timer;
        if (!wait) {
            timer = setTimeout(() => ctl.abort(this.#noAnswer(k)), this.#requestTimeoutMs);
        }
        else if (opts.waitMs !== undefined) {
            // The server ends the wait at waitMs ("timeout"); this bound
            // covers a server that ignores waitMs, and time lost to reconnects.
            const grace = Math.min(2_000, 200 + opts.waitMs / 10);
            timer = setTimeout(() => ctl.abort(new TimeoutError(`lockgate: ${k.op} ${what}: not granted within waitMs ${opts.waitMs}`)), opts.waitMs + grace);
        }
        try {
            return await this.#do(k, ctl.signal);
        }
        finally {
            if (timer)
                clearTimeout(timer);
            for (const s of stops)
                s();
        }
    }
    /**
     * #acquireAll is acquireAll (wait) and tryAcquireAll: one "grants" reply
     * with a lease per key, in order, or nothing held. A grant one of whose
     * leases cannot be used (it expired on arrival) is given back whole.
     */
    async #acquireAll(keys, opts, wait) {
        if (this.#closed)
            throw this.#closedError();
        checkKeys(keys);
        const p = this.#prepare(opts);
        opts.signal?.throwIfAborted();
        keys = [...keys];
        const what = JSON.stringify(keys);
        // Never cached; an unused cached lease of one of the keys would hold it against us.
        if (this.#cache)
            for (const stale of this.#cache.evict(keys))
                await this.#releaseQuietly(stale);
        for (let gone = 0;;) {
            const chosen = await this.#sessionFor(opts, p);
            const session = chosen === Outside ? undefined : chosen;
            const lp = chosen === Outside ? this.#outside(p) : p;
            const handle = newHandle();
            this.#early.set(handle, false);
            try {
                const req = { commandType: wait ? Cmd.acquireAll : Cmd.tryAcquireAll, keys, clientId: lp.owner, ttl: lp.ttlMs, lockToken: handle };
                if (opts.value !== undefined)
                    req.value = opts.value;
                if (wait && opts.waitMs !== undefined)
                    req.waitMs = opts.waitMs;
                this.#primitiveFields(req, p);
                this.#sessionFields(req, session);
                const needs = ["multikey", ...p.needs, ...(session ? ["sessions"] : [])];
                const k = newCall(wait ? "acquire-all" : "try-acquire-all", req, { wait, grantable: true, needs });
                const r = await this.#runAcquire(k, opts, wait, what);
                if (this.#sessionGone(r, k, opts, session, gone++))
                    continue;
                if (r.type !== "grants")
                    throw this.#unexpected(r, k, "grants");
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
                    const lease = await this.#lease({ ...g, type: "grant" }, keys[i], lp, k.first, opts.value, session);
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
                for (const l of leases)
                    await this.#release(l).catch(() => { });
                const conn = this.#conn;
                for (const g of got.slice(leases.length + (expired ? 1 : 0))) {
                    if (g.key && g.lockToken)
                        await this.#releaseRaced(conn, { type: "grant", key: g.key, lockToken: g.lockToken, fencingToken: g.fencingToken ?? 0n });
                }
                if (!(expired && wait))
                    throw lost;
                this.#log(`a grant of ${what} expired on arrival; queueing again`);
            }
            finally {
                this.#early.delete(handle);
            }
        }
    }
    /**
     * #lease turns a grant into a Lease. sent is the send time of the first
     * copy of the acquire: the TTL started on the server after it. If less
     * than half the TTL is left of sent + ttl (a long wait), the lease is
     * renewed at once and the renewal's send time used. undefined when that
     * renewal found the lease gone.
     */
    async #lease(r, key, p, sent, value, session) {
        if (!r.lockToken || r.fencingToken === undefined) {
            throw new LockgateError("unavailable", `lockgate: acquire ${JSON.stringify(key)}: grant without lockToken or fencingToken`);
        }
        // A grant in the session lives as long as the session: its deadline is
        // the session's. One that does not name the session (a gateway that
        // ignored sessionId) is an ordinary lease.
        const inSession = session && r.sessionId === session.id ? session : undefined;
        if (session && !inSession)
            this.#log(`the grant of ${key} names no session; it renews itself`);
        if (inSession && !inSession.alive)
            return undefined; // the session ended while the acquire waited
        const ttl = r.ttl && r.ttl > 0 && r.ttl < p.ttlMs ? r.ttl : p.ttlMs;
        if (!inSession && needsEarlyRenew(sent, ttl, now())) {
            try {
                sent = await this.#renew(key, r.lockToken, r.fencingToken, ttl);
            }
            catch (e) {
                if (e instanceof NotHeldError)
                    return undefined;
                this.#log(`renewing a late grant of ${key} failed; its deadline stays short: ${e.message}`);
            }
        }
        const lease = new Lease(this.#ops, {
            key,
            owner: r.owner || p.owner,
            lockToken: r.lockToken,
            fencingToken: r.fencingToken,
            ttlMs: ttl,
            sent,
            ...(value !== undefined ? { value } : {}),
            autoRenew: p.autoRenew && !this.#closed,
            wanted: !!r.wanted || this.#early.get(r.lockToken) === true,
            mode: r.mode === "shared" ? "shared" : "exclusive",
            permits: typeof r.permits === "number" ? r.permits : 0,
            ...(inSession ? { session: inSession } : {}),
        });
        if (lease.reason === undefined)
            this.#held.set(heldKey(key, lease.lockToken), lease);
        return lease;
    }
    // ---- sessions ----
    /**
     * #sessionFor is the session an acquire's lease goes into: the caller's
     * (opts.session, checked), none (null, an explicit ttlMs, no auto-renew,
     * sessions off), or the client's own, opened on first use; Outside when
     * the lease would have gone into the client's own session but cannot
     * (the gateway refused it, now or less than sessionRetryMs ago, or
     * opening it failed).
     */
    async #sessionFor(opts, p) {
        const s = opts.session;
        if (s === null)
            return undefined;
        if (s !== undefined) {
            if (!(s instanceof Session))
                throw new LockgateError("bad_json", "lockgate: session is not a Session of this client");
            if (opts.ttlMs !== undefined && opts.ttlMs !== s.ttlMs) {
                throw new LockgateError("invalid_ttl", `lockgate: a lease in a session takes the session's TTL (${s.ttlMs} ms): leave ttlMs absent`);
            }
            if (s.reason !== undefined)
                throw new SessionExpiredError(`lockgate: acquire in a session that ended (${s.reason})`);
            return s;
        }
        if (!this.#useSessions || opts.ttlMs !== undefined || !p.autoRenew)
            return undefined;
        const own = this.#ownSession;
        if (own && own.alive)
            return own;
        const conn = this.#conn;
        if (conn && !conn.closed && (this.#noSessionsOn === conn || (conn.featuresKnown && !conn.features.includes("sessions"))))
            return undefined;
        if (this.#fallingBack && now() < this.#ownRetryAt) {
            this.#sessionCounts.fallbacks++;
            return Outside;
        }
        this.#ownOpening ??= this.#openOwn().finally(() => (this.#ownOpening = undefined));
        const got = opts.signal
            ? await abortable(this.#ownOpening, opts.signal).catch((e) => {
                throw opts.signal.aborted ? new CancelledError("lockgate: acquire: cancelled by the caller", opts.signal.reason) : e;
            })
            : await this.#ownOpening;
        if (got === Outside && this.#fallingBack)
            this.#sessionCounts.fallbacks++;
        return got;
    }
    /** #outside is p for a lease that would have gone into the client's session and renews itself: the session's TTL when sessionTtlMs sets one. */
    #outside(p) {
        return this.#sessionTtlMs !== undefined ? { ...p, ttlMs: this.#sessionTtlMs } : p;
    }
    /**
     * #openOwn opens the client's own session. A gateway without sessions
     * (not announced, or an older one answering unknown_command) is
     * remembered for its connection (undefined: the lease renews itself, as
     * everywhere on that gateway). A refusal — quota_exceeded,
     * too_many_sessions — starts a fallback period: acquires go without the
     * session (Outside) and ask again after sessionRetryMs; it is warned of
     * once per period and counted. forbidden and unauthorized fail the
     * acquire; any other failure but the client's close leaves it to a
     * lease that renews itself (Outside).
     */
    async #openOwn() {
        try {
            const s = await this.#openSession({});
            if (this.#closed)
                return undefined;
            this.#ownSession = s;
            this.#sessionCounts.opened++;
            if (this.#fallingBack)
                this.#log("the client's session opened after refusals; auto-renewed leases go into it again");
            this.#fallingBack = false;
            return s;
        }
        catch (e) {
            if (this.#closed || (e instanceof LockgateError && e.code === "closed"))
                throw this.#closedError();
            const code = e instanceof LockgateError ? e.code : "";
            if (e instanceof UnsupportedError || code === "unknown_command") {
                this.#noSessionsOn = this.#conn;
                return undefined;
            }
            if (code === "forbidden" || code === "unauthorized")
                throw e;
            if (code === "quota_exceeded" || code === "too_many_sessions") {
                this.#sessionCounts.refused++;
                this.#ownRetryAt = now() + this.#sessionRetryMs;
                if (!this.#fallingBack) {
                    this.#fallingBack = true;
                    this.#warn(`lockgate: the gateway refused the client's session (${e.message}); auto-renewed leases renew themselves one by one until it opens (asked again after ${this.#sessionRetryMs} ms)`);
                }
                else {
                    this.#log(`the gateway refused the client's session again: ${e.message}`);
                }
                return Outside;
            }
            this.#log(`opening the client's session failed; the lease renews itself: ${e.message}`);
            return Outside;
        }
    }
    async #openSession(o) {
        if (this.#closed)
            throw this.#closedError();
        const ttl = o.ttlMs ?? this.#sessionTtlMs;
        if (ttl !== undefined)
            checkTtl(ttl);
        const owner = o.clientId ?? this.clientId;
        checkOwner(owner);
        const req = { commandType: Cmd.openSession, clientId: owner };
        if (ttl !== undefined)
            req.ttl = ttl;
        const k = newCall("open-session", req, { needs: ["sessions"] });
        const r = await this.#oneShot(k, o.signal);
        if (r.type !== "session")
            throw this.#unexpected(r, k, "session");
        if (!r.sessionId || typeof r.ttl !== "number" || !(r.ttl > 0)) {
            throw new LockgateError("unavailable", "lockgate: open-session: a session reply without sessionId or ttl");
        }
        // The TTL started on the server after the first copy went out (a
        // re-sent open may have opened a second session; the one answered
        // started no earlier). Never count on more than was asked for.
        const s = new Session(this.#sessionOps, {
            id: r.sessionId,
            owner,
            ttlMs: ttl !== undefined ? Math.min(ttl, r.ttl) : r.ttl,
            sent: k.first,
            keepAlive: (o.keepAlive ?? true) && !this.#closed,
        });
        this.#sessions.add(s);
        return s;
    }
    /** #renewSession is one keep-alive of s: the answered copy's send time; SessionExpiredError (s ends "not_held") when the server no longer has it. */
    async #renewSession(s, signal) {
        if (this.#closed)
            throw this.#closedError();
        // During an election the retries must not sleep past the session's deadline.
        // ttl: a gateway that has not seen the session (a new leader's) takes it as the session's.
        const k = newCall("renew-session", { commandType: Cmd.renewSession, sessionId: s.id, ttl: s.ttlMs }, { maxBackoffMs: Math.max(BackoffBaseMs, s.ttlMs / 10) });
        const r = await this.#oneShot(k, signal);
        if (r.type === "sessionRenewed")
            return k.last;
        if (r.error?.code === "session_expired" || r.error?.code === "not_held") {
            s._end("not_held");
            throw new SessionExpiredError(`lockgate: renew-session: ${r.error.code}${r.error.message ? ": " + r.error.message : ""}`);
        }
        throw this.#unexpected(r, k, "sessionRenewed");
    }
    /**
     * #closeSession closes s on the server, releasing every lease in it. A
     * re-sent close answered session_expired, whose earlier copy may have
     * arrived, counts as closed when the session was alive by our clock as
     * the answered copy went out (as #release judges a re-sent release).
     */
    async #closeSession(s) {
        if (this.#closed)
            throw this.#closedError();
        let alive = false;
        const k = newCall("close-session", { commandType: Cmd.closeSession, sessionId: s.id }, { onSend: (t) => (alive = s.reason === undefined && t < s.deadline) });
        const r = await this.#oneShot(k);
        if (r.type === "sessionClosed") {
            s._end("released");
            return;
        }
        if (r.error?.code === "session_expired") {
            if (k.prior && alive) {
                s._end("released");
                return;
            }
            s._end("not_held");
            throw new SessionExpiredError(`lockgate: close-session: session_expired${r.error.message ? ": " + r.error.message : ""}`);
        }
        throw this.#unexpected(r, k, "sessionClosed");
    }
    /** #sessionFields puts an acquire's lease in session: its id, and no ttl (the lease takes the session's). */
    #sessionFields(req, session) {
        if (!session)
            return;
        req.sessionId = session.id;
        delete req.ttl;
    }
    /**
     * #sessionGone handles an acquire answered session_expired: the session
     * ends here too (its leases "not_held"); the client's own session is
     * replaced and the acquire tried again, once (true); a caller's session
     * fails it.
     */
    #sessionGone(r, k, opts, session, before) {
        if (!session || r.error?.code !== "session_expired")
            return false;
        session._end("not_held");
        if (opts.session !== undefined || before > 0)
            throw this.#unexpected(r, k, "grant");
        this.#log(`the client's session is gone on the server; ${k.op} ${this.#what(k)} again in a new one`);
        return true;
    }
    /** #releaseOrKeep is Lease.release: with the cache on, a lease nobody else wants is kept instead of released. */
    async #releaseOrKeep(lease) {
        if (this.#cache && !this.#closed && this.#cache.put(lease, this.#signalsWanted))
            return;
        return this.#release(lease);
    }
    /** #releaseQuietly releases for real a lease the cache gave up; a failure is logged (the lease then ends at its TTL). */
    async #releaseQuietly(lease) {
        try {
            await this.#track(this.#release(lease));
        }
        catch (e) {
            this.#log(`releasing a cached lease of ${lease.key} failed; it ends at its TTL: ${e.message}`);
        }
    }
    /** #renew extends (key, lockToken) to ttlMs; resolves with the answered copy's send time; NotHeldError when not held. */
    async #renew(key, lockToken, token, ttlMs, signal) {
        if (this.#closed)
            throw this.#closedError();
        checkTtl(ttlMs);
        // During an election the retries must not sleep past the lease's
        // deadline: ttl/10 between them, as between the attempts of auto-renew.
        const k = newCall("renew", { commandType: Cmd.renew, key, lockToken, fencingToken: { key, value: token }, ttl: ttlMs }, {
            maxBackoffMs: Math.max(BackoffBaseMs, ttlMs / 10),
        });
        const r = await this.#oneShot(k, signal);
        if (r.type === "renewed")
            return k.last;
        throw this.#unexpected(r, k, "renewed");
    }
    /**
     * #release frees the lease on the gateway. A re-sent release answered
     * not_held, whose earlier copy may have arrived (its connection dropped
     * before the answer), counts as released when the lease was alive by our
     * clock as the answered copy went out: nothing else can have freed it.
     */
    async #release(lease) {
        if (this.#closed)
            throw this.#closedError();
        let alive = false;
        const k = newCall("release", { commandType: Cmd.release, key: lease.key, lockToken: lease.lockToken, fencingToken: { key: lease.key, value: lease.fencingToken }, ack: true }, { onSend: (t) => (alive = lease.reason === undefined && t < lease.deadline) });
        const r = await this.#oneShot(k);
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
        throw this.#unexpected(r, k, "released");
    }
    async #inspect(key, signal) {
        if (this.#closed)
            throw this.#closedError();
        checkKey(key);
        const k = newCall("inspect", { commandType: Cmd.inspect, key });
        const r = await this.#oneShot(k, signal);
        if (r.error?.code === "not_found")
            return null;
        if (r.type !== "info")
            throw this.#unexpected(r, k, "info");
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
    /** #oneShot runs a call bounded by requestTimeoutMs (and signal, and close). */
    async #oneShot(k, signal) {
        const ctl = new AbortController();
        const t = setTimeout(() => ctl.abort(this.#noAnswer(k)), this.#requestTimeoutMs);
        const onAbort = () => ctl.abort(signal.reason);
        const onClose = () => ctl.abort(this.#closedError());
        if (signal?.aborted)
            onAbort();
        signal?.addEventListener("abort", onAbort, { once: true });
        this.#closing.signal.addEventListener("abort", onClose, { once: true });
        try {
            return await this.#do(k, ctl.signal);
        }
        finally {
            clearTimeout(t);
            signal?.removeEventListener("abort", onAbort);
            this.#closing.signal.removeEventListener("abort", onClose);
        }
    }
    #what(k) {
        return JSON.stringify(k.req.key ?? k.req.keys ?? "");
    }
    #noAnswer(k) {
        const why = this.#dialErr ? ` (last dial: ${this.#dialErr.message})` : "";
        return new LockgateError("unavailable", `lockgate: ${k.op} ${this.#what(k)}: no answer within ${this.#requestTimeoutMs} ms${why}`);
    }
    #unexpected(r, k, want) {
        const what = `${k.op} ${this.#what(k)}`;
        if (r.type === "error")
            return errorFromReply(r.error, what);
        return new LockgateError("internal", `lockgate: ${what}: answered ${JSON.stringify(r.type)} where ${JSON.stringify(want)} was expected`);
    }
    // ---- the request loop ----
    /**
     * #do sends k and returns the first answer that is not a transient
     * failure. Dropped connections, not_leader redirects, closed gateways and
     * unavailable answers are retried (redirects at once, the rest with
     * backoff) until signal aborts; then it throws the signal's reason, after
     * cancelling a waiting acquire on the gateway.
     */
    async #do(k, signal) {
        let hops = 0;
        let retry = 0;
        for (;;) {
            signal.throwIfAborted();
            const conn = await abortable(this.#getConn(), signal);
            if (k.needs && conn.featuresKnown) {
                const missing = k.needs.find((f) => !conn.features.includes(f));
                if (missing !== undefined) {
                    throw new UnsupportedError(`lockgate: ${k.op} ${this.#what(k)}: unsupported: the gateway ${conn.addr} does not offer ${JSON.stringify(missing)} (Lockgate-Features: ${conn.features.join(",") || "none"})`, missing);
                }
            }
            const id = this.#newId();
            const p = conn.register(id);
            if (!p)
                continue;
            const t = now();
            if (k.sends === 0)
                k.first = t;
            k.sends++;
            k.last = t;
            k.req.id = id;
            k.onSend?.(t);
            try {
                conn.send(k.req);
            }
            catch {
                conn.unregister(id);
                k.prior = true; // part of the frame may have gone out
                continue;
            }
            let r;
            try {
                r = await abortable(this.#answer(p), signal);
            }
            catch (e) {
                await this.#abandon(conn, id, p, k);
                throw e;
            }
            conn.unregister(id);
            if (r === null) {
                k.prior = true;
                this.#log(`re-sending ${k.op} ${k.req.key} after a dropped connection to ${conn.addr}`);
                continue;
            }
            switch (r.error?.code) {
                case "not_leader": {
                    let addr = r.error.leader?.addr ?? "";
                    if (addr && this.#isDead(addr))
                        addr = ""; // just failed to answer a dial: as if unknown
                    if (addr) {
                        if (hops < this.#maxHops) {
                            hops++;
                            if (addr !== conn.addr) {
                                // Every request on this connection would be redirected too: move it.
                                this.#log(`redirected from ${conn.addr} to the leader at ${addr}`);
                                conn.closeFor(addr, false, new Error("not_leader"));
                                continue;
                            }
                            // The named leader is this node, not ready yet: back off.
                        }
                        else if (!k.wait) {
                            throw errorFromReply(r.error, `${k.op} ${this.#what(k)}`);
                        }
                        else {
                            hops = 0; // a waiting acquire keeps looking, after a pause
                        }
                    }
                    await sleep(backoffMs(++retry, BackoffBaseMs, k.maxBackoffMs ?? BackoffMaxMs), signal);
                    continue;
                }
                case "closed":
                    conn.closeFor("", true, new Error("gateway closing"));
                    continue;
                case "unavailable":
                case "too_many_waiters":
                    if (r.error.code === "unavailable") {
                        k.prior = true; // outcome unknown for writes
                        conn.strike();
                    }
                    await sleep(backoffMs(++retry, BackoffBaseMs, k.maxBackoffMs ?? BackoffMaxMs), signal);
                    continue;
                case "cancelled":
                    if (!k.wait)
                        return r;
                    // Nobody asked for it (we cancel only when giving up): the
                    // gateway dropped the wait. Queue again.
                    await sleep(backoffMs(++retry, BackoffBaseMs, k.maxBackoffMs ?? BackoffMaxMs), signal);
                    continue;
                case "rate_limited": {
                    if (!k.wait)
                        break;
                    // A waiting acquire waits out the identity's rate (the request
                    // was not carried out) and sends it again, within its waitMs
                    // and signal; the others throw RateLimitedError.
                    const retryIn = r.error.retryIn;
                    const ms = typeof retryIn === "number" && retryIn > 0 ? retryIn : backoffMs(++retry, BackoffBaseMs, k.maxBackoffMs ?? BackoffMaxMs);
                    this.#log(`${k.op} ${this.#what(k)} rate-limited by ${conn.addr}; sending it again in ${ms} ms`);
                    await sleep(ms, signal);
                    continue;
                }
            }
            conn.good();
            return r;
        }
    }
    /** #answer is the next reply that is not an interim "queued" (null: the connection dropped). */
    async #answer(p) {
        for (;;) {
            const r = await p.next();
            if (r === null || r.type !== "queued")
                return r;
        }
    }
    /**
     * #abandon gives up the copy of k sent on conn as id. A waiting acquire is
     * cancelled on the gateway (command 6) and its final answer awaited: a
     * grant that raced with the cancel is released, so the caller is never
     * left holding a lock it did not get. A try-acquire's answer is awaited
     * in the background for the same reason.
     */
    async #abandon(conn, id, p, k) {
        if (!k.grantable) {
            conn.unregister(id);
            return;
        }
        const settle = async () => {
            try {
                const r = await Promise.race([this.#answer(p), sleep(this.#requestTimeoutMs).then(() => "timeout")]);
                if (r === "timeout") {
                    this.#log(`no answer to a cancelled ${k.op} of ${k.req.key}; closing the connection so that the gateway drops the wait`);
                    conn.close(new Error("cancelled acquire never answered"));
                }
                else if (r?.type === "grant") {
                    await this.#releaseRaced(conn, r);
                }
                else if (r?.type === "grants") {
                    for (const g of r.leases ?? []) {
                        if (g.key && g.lockToken)
                            await this.#releaseRaced(conn, { type: "grant", key: g.key, lockToken: g.lockToken, fencingToken: g.fencingToken ?? 0n });
                    }
                }
                else if (r === null) {
                    this.#log(`connection lost while giving up ${k.op} of ${k.req.key}; a grant that raced in stays held until its TTL`);
                }
            }
            finally {
                conn.unregister(id);
            }
        };
        if (!k.wait) {
            void settle();
            return;
        }
        try {
            conn.send({ id: this.#newId(), commandType: Cmd.cancel, target: id });
        }
        catch (e) {
            this.#log(`could not send the cancel of ${k.op} ${k.req.key}: ${e.message}`);
        }
        await settle();
    }
    /** #releaseRaced releases a grant that arrived for a request its caller gave up. */
    async #releaseRaced(conn, r) {
        const req = {
            commandType: Cmd.release, key: r.key, lockToken: r.lockToken, fencingToken: { key: r.key, value: r.fencingToken ?? 0n }, ack: true,
        };
        const id = this.#newId();
        const p = conn?.register(id);
        if (conn && p) {
            try {
                conn.send({ ...req, id });
                const a = await Promise.race([this.#answer(p), sleep(this.#requestTimeoutMs).then(() => null)]);
                if (a && (a.type === "released" || a.error?.code === "not_held"))
                    return;
            }
            catch {
                // fall through to a fresh call
            }
            finally {
                conn.unregister(id);
            }
        }
        if (this.#closed) {
            this.#log(`could not release a grant of ${r.key} that raced with giving up; it stays held until its TTL`);
            return;
        }
        try {
            const a = await this.#oneShot(newCall("release", req));
            if (a.type === "released" || a.error?.code === "not_held")
                return;
        }
        catch {
            // logged below
        }
        this.#log(`could not release a grant of ${r.key} that raced with giving up; it stays held until its TTL`);
    }
    // ---- connections ----
    #isDead(addr) {
        const at = this.#dead.get(addr);
        return at !== undefined && now() - at < DeadForMs;
    }
    /** #getConn is the live connection, connecting (with backoff) when there is none. */
    #getConn() {
        if (this.#closed)
            return Promise.reject(this.#closedError());
        if (this.#conn && !this.#conn.closed)
            return Promise.resolve(this.#conn);
        this.#connecting ??= this.#connect().finally(() => (this.#connecting = undefined));
        return this.#connecting;
    }
    async #connect() {
        const old = this.#conn;
        if (old) {
            this.#conn = undefined;
            // Learn from how the last connection ended.
            this.#avoid = old.avoid ? old.addr : "";
            if (old.redirect)
                this.#next = old.redirect;
            else if (old.useful || now() - old.born > 10_000)
                this.#attempt = 0; // it worked: reconnect at once
            else
                this.#attempt++;
            if (!old.redirect)
                this.#log(`connection to ${old.addr} lost: ${old.cause?.message ?? "closed"}`);
        }
        for (;;) {
            if (this.#closed)
                throw this.#closedError();
            let addr = this.#next;
            this.#next = "";
            if (!addr) {
                if (this.#attempt > 0)
                    await sleep(backoffMs(this.#attempt), this.#closing.signal);
                addr = this.#pick(this.#avoid);
            }
            try {
                const conn = await this.#dial(addr);
                this.#dialErr = undefined;
                this.#dead.delete(addr);
                this.#conn = conn;
                this.#signalsWanted = conn.wantedFeature;
                this.#log(`connected to ${conn.addr}`);
                if (this.#closed)
                    conn.close(new Error("client closed"), 1000);
                return conn;
            }
            catch (e) {
                if (e instanceof LockgateError && e.code === "unauthorized")
                    throw e;
                this.#dialErr = e;
                this.#dead.set(addr, now());
                this.#avoid = addr;
                this.#attempt++;
                this.#log(`connect to ${addr} failed (attempt ${this.#attempt}): ${e.message}`);
            }
        }
    }
    /** #dial connects to addr, following handshake redirects (421 body, 307 Location) for at most maxHops hops. */
    async #dial(addr) {
        for (let hop = 0;; hop++) {
            const res = await dial(wsUrl(addr, this.#secure), {
                timeoutMs: this.#dialTimeoutMs,
                ...(this.#token !== undefined ? { token: this.#token } : {}),
                ...(this.#tls !== undefined ? { tls: this.#tls } : {}),
                ...(this.#webSocket !== undefined ? { webSocket: this.#webSocket } : {}),
            });
            if ("redirect" in res) {
                if (!res.redirect || res.redirect === addr || hop >= this.#maxHops) {
                    throw new LockgateError("unavailable", `lockgate: dial ${addr}: redirected (to ${res.redirect || "nobody"}) too often`);
                }
                this.#log(`handshake redirected from ${addr} to ${res.redirect}`);
                addr = res.redirect;
                continue;
            }
            return new Conn(res, addr, (r) => this.#onWanted(r), (m) => this.#log(m));
        }
    }
    #pick(avoid) {
        const n = this.#endpoints.length;
        let i = Math.floor(Math.random() * n);
        if (n > 1 && this.#endpoints[i] === avoid)
            i = (i + 1 + Math.floor(Math.random() * (n - 1))) % n;
        return this.#endpoints[i];
    }
    #onWanted(r) {
        if (!r.lockToken)
            return;
        const lease = this.#held.get(heldKey(r.key ?? "", r.lockToken));
        if (lease)
            lease._markWanted();
        else if (this.#early.has(r.lockToken))
            this.#early.set(r.lockToken, true);
    }
}
