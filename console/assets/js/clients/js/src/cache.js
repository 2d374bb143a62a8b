/**
 * The lease cache (ClientOptions.cacheLeases; docs/lease-cache.md): the
 * TypeScript counterpart of the Go SDK's client/cache.go, with the same
 * semantics. A lease the application releases stays with the client,
 * unused, still held on the server and still renewed, so that the next
 * acquire of its key with the same options costs no round trip; it is
 * released for real as soon as the gateway pushes "wanted" (another caller
 * waits for the key), after cacheIdleMs unused, or at close().
 */
import { NotHeldError } from "./errors.js";
import { now } from "./timing.js";
/** Defaults of the lease cache (ClientOptions.cacheIdleMs, maxCachedLeases). */
export const DefaultCacheIdleMs = 10_000;
export const DefaultMaxCachedLeases = 1024;
/** @internal */
export class LeaseCache {
    #ops;
    #idleMs;
    #max;
    #closed = false;
    #entries = new Map(); // by key: the client cannot hold a key twice
    #unused = 0;
    #hits = 0;
    #misses = 0;
    #kept = 0;
    #reclaimed = 0;
    #idle = 0;
    constructor(ops, idleMs, max) {
        this.#ops = ops;
        this.#idleMs = idleMs;
        this.#max = max;
    }
    /**
     * take returns the cached lease of key for an acquire with opts, marking
     * it in use (hit), or nothing. stale is an unused lease of key that
     * cannot serve opts (other options, wanted, ended, or less than half its
     * TTL left): it has left the cache, and the caller must release it for
     * real before it asks the gateway, or it would wait behind its own lease.
     */
    take(key, opts) {
        const e = this.#entries.get(key);
        if (!e || e.inUse) {
            this.#misses++;
            return {};
        }
        this.#unused--;
        if (!serves(e, opts)) {
            this.#remove(e);
            this.#misses++;
            return { stale: e.lease };
        }
        e.inUse = true;
        this.#hits++;
        return { hit: e.lease };
    }
    /**
     * evict takes the unused leases of keys out of the cache, for the caller
     * to release for real: an acquire the cache cannot serve (shared,
     * semaphore, lock-delay, several keys) would otherwise wait behind them.
     */
    evict(keys) {
        const out = [];
        for (const k of keys) {
            const e = this.#entries.get(k);
            if (!e || e.inUse)
                continue;
            this.#unused--;
            this.#remove(e);
            this.#misses++;
            out.push(e.lease);
        }
        return out;
    }
    /** hold records a lease the gateway granted with the cache on, in use. */
    hold(lease, opts) {
        if (this.#closed || opts.releaseOnDisconnect || lease.reason !== undefined)
            return;
        const old = this.#entries.get(lease.key);
        if (old) {
            if (old.lease.reason === undefined)
                return; // cannot happen while it lives: the key is ours once
            if (!old.inUse)
                this.#unused--;
            this.#remove(old);
        }
        this.#entries.set(lease.key, { lease, opts, inUse: true, timer: undefined, periodMs: 0, ticksLeft: 0 });
        void lease.lost.then(() => this.#drop(lease));
        void lease.wanted.then(() => this.#reclaim(lease));
    }
    /**
     * put is release's part: it keeps a lease the application releases, and
     * reports whether it did (true) — or throws NotHeldError for a lease
     * already kept. A lease that is wanted, ended, or may not be kept (the
     * cache is closed or full, or the gateway does not push "wanted", so that
     * nobody could reclaim it) is left to a real release (false).
     */
    put(lease, gatewayTells) {
        const e = this.#entries.get(lease.key);
        if (!e || e.lease !== lease)
            return false;
        if (!e.inUse) {
            throw new NotHeldError(`lockgate: release ${JSON.stringify(lease.key)} (token ${lease.fencingToken}): released already; the client's lease cache keeps it until another caller wants it`);
        }
        if (this.#closed || !gatewayTells || lease.reason !== undefined || lease.isWanted || this.#unused >= this.#max) {
            this.#remove(e);
            return false;
        }
        e.inUse = false;
        this.#unused++;
        this.#kept++;
        this.#arm(e);
        return true;
    }
    /** #arm (re)starts e's timer for its unused time. */
    #arm(e) {
        const l = e.lease;
        const period = e.opts.autoRenew ? this.#idleMs : Math.min(this.#idleMs, l.ttlMs / 3);
        e.ticksLeft = Math.max(1, Math.ceil(this.#idleMs / period - 1e-9));
        if (e.timer && e.periodMs === period && typeof e.timer.refresh === "function") {
            e.timer.refresh();
            return;
        }
        if (e.timer)
            clearTimeout(e.timer);
        e.periodMs = period;
        e.timer = setTimeout(() => this.#tick(e), period);
        e.timer.unref?.(); // a cached lease alone does not keep the process alive (as a held one does not)
    }
    /**
     * #tick is e's timer: after cacheIdleMs unused the lease is released for
     * real; before, one that the application did not ask to auto-renew is
     * renewed (a refused renewal ends it, and #drop removes it).
     */
    #tick(e) {
        if (this.#entries.get(e.lease.key) !== e || e.inUse)
            return; // taken again, or gone: dormant
        if (--e.ticksLeft <= 0) {
            this.#unused--;
            this.#remove(e);
            this.#idle++;
            void this.#ops.releaseQuietly(e.lease);
            return;
        }
        if (!e.opts.autoRenew) {
            e.lease.renew().catch((err) => {
                if (!(err instanceof NotHeldError))
                    this.#ops.log(`renewing cached lease of ${e.lease.key} failed: ${err.message}`);
            });
        }
        if (typeof e.timer?.refresh === "function") {
            e.timer.refresh();
        }
        else {
            e.timer = setTimeout(() => this.#tick(e), e.periodMs);
        }
    }
    /**
     * #reclaim runs when the lease is wanted: an unused lease is released for
     * real at once; one in use is left to the application, which sees
     * lease.wanted (and whose release then releases it for real).
     */
    #reclaim(lease) {
        const e = this.#entries.get(lease.key);
        if (!e || e.lease !== lease || e.inUse)
            return;
        this.#unused--;
        this.#remove(e);
        this.#reclaimed++;
        void this.#ops.releaseQuietly(lease);
    }
    /** #drop runs when the lease ends (refused renewal, deadline, real release): it leaves the cache and is never handed out. */
    #drop(lease) {
        const e = this.#entries.get(lease.key);
        if (!e || e.lease !== lease)
            return;
        if (!e.inUse)
            this.#unused--;
        this.#remove(e);
    }
    /** #remove deletes e (its unused count already settled) and stops its timer. */
    #remove(e) {
        if (e.timer)
            clearTimeout(e.timer);
        e.timer = undefined;
        this.#entries.delete(e.lease.key);
    }
    /** close stops caching and releases every unused lease for real, resolving when the releases have been answered (or failed). */
    async close() {
        this.#closed = true;
        const doomed = [];
        for (const e of [...this.#entries.values()]) {
            if (e.inUse)
                continue;
            this.#unused--;
            this.#remove(e);
            doomed.push(e.lease);
        }
        await Promise.all(doomed.map((l) => this.#ops.releaseQuietly(l)));
    }
    stats() {
        return { hits: this.#hits, misses: this.#misses, kept: this.#kept, reclaimed: this.#reclaimed, idle: this.#idle, unused: this.#unused };
    }
}
/**
 * serves reports whether the unused lease of e can answer an acquire with
 * opts: still alive, nobody waits for it, the same options, and at least
 * half its TTL left (a lease whose renewals lag is not handed out).
 */
function serves(e, opts) {
    const l = e.lease;
    return (l.reason === undefined &&
        !l.isWanted &&
        opts.owner === e.opts.owner &&
        opts.ttlMs === e.opts.ttlMs &&
        opts.value === e.opts.value &&
        opts.autoRenew === e.opts.autoRenew &&
        !opts.releaseOnDisconnect &&
        l.deadline - now() > l.ttlMs / 2);
}
