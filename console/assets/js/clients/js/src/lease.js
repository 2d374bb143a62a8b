/**
 * A held lock: its tokens, its deadline, and the signals of its end.
 */
import { LockgateError, NotHeldError } from "./errors.js";
import { KeepAlive } from "./keepalive.js";
import { deadlineOf, now } from "./timing.js";
/** LeaseLostError is the reason of a lease's `signal` once it ends. */
export class LeaseLostError extends LockgateError {
    name = "LeaseLostError";
    reason;
    constructor(key, reason) {
        super("not_held", `lockgate: lease of ${JSON.stringify(key)} ended: ${reason}`);
        this.reason = reason;
    }
}
/**
 * Lease is a granted lock. Act as the holder only while `signal` is not
 * aborted (equivalently, before `deadline` by performance.now()), and send
 * `fencingToken` with every write to a fenced resource.
 */
export class Lease {
    /** The lock's key. */
    key;
    /** The owner (client id) recorded with the lock. */
    owner;
    /** The lease's secret handle; renew and release send it. */
    lockToken;
    /**
     * The fencing token: strictly increasing across successive grants of the
     * key. A bigint, so that every 64-bit value is exact.
     */
    fencingToken;
    /** The value stored with the lock, if any. */
    value;
    /** "shared" for a read lock or a semaphore permit, else "exclusive". */
    mode;
    /** A semaphore permit's number of permits (0 otherwise). */
    permits;
    /** Resolves with the reason once the lease ends (it never rejects). */
    lost;
    /** Aborted once the lease ends (reason: a LeaseLostError): the counterpart of Go's Lease.Done. */
    signal;
    /** Resolves when another caller waits for this key (the gateway's "wanted" push). A hint, never a revocation. */
    wanted;
    /**
     * The session the lease belongs to, or undefined: a session lease is
     * renewed by its session's keep-alive (its own autoRenew is off), its
     * deadline is the session's, and it ends when the session does.
     */
    session;
    #ops;
    #ttlMs;
    #sent;
    #deadline;
    #reason;
    #isWanted = false;
    #resolveLost;
    #resolveWanted;
    #abort = new AbortController();
    /** The deadline timer and, with autoRenew, the renewals (keepalive.ts, as a session's keep-alive). */
    #keep;
    /** @internal */
    constructor(ops, g) {
        this.#ops = ops;
        this.key = g.key;
        this.owner = g.owner;
        this.lockToken = g.lockToken;
        this.fencingToken = g.fencingToken;
        this.value = g.value;
        this.mode = g.mode ?? "exclusive";
        this.permits = g.permits ?? 0;
        this.session = g.session;
        this.#ttlMs = g.session ? g.session.ttlMs : g.ttlMs;
        this.#sent = g.session ? g.session.sent : g.sent;
        this.#deadline = deadlineOf(this.#sent, this.#ttlMs);
        this.lost = new Promise((res) => (this.#resolveLost = res));
        this.wanted = new Promise((res) => (this.#resolveWanted = res));
        this.signal = this.#abort.signal;
        const lease = this;
        this.#keep = new KeepAlive({
            get ttlMs() {
                return lease.#ttlMs;
            },
            get sent() {
                return lease.#sent;
            },
            get deadline() {
                return lease.#deadline;
            },
            get reason() {
                return lease.#reason;
            },
            renewOnce: (signal) => this.#ops.renew(this, this.#ttlMs, signal),
            renewed: (sent) => this._renewed(sent, this.#ttlMs),
            isLoss: (e) => e instanceof NotHeldError,
            end: (reason) => this._end(reason),
        }, g.session ? false : g.autoRenew, "renewal");
        if (g.wanted)
            this._markWanted();
        if (g.session && !g.session._add(this)) {
            this._end(g.session.reason ?? "expired");
            return;
        }
        this.#keep.extended();
    }
    /** The TTL of the last grant or renewal, ms. */
    get ttlMs() {
        return this.#ttlMs;
    }
    /** When the request that started the current TTL was sent (performance.now() ms). */
    get sent() {
        return this.#sent;
    }
    /** The last instant, on performance.now()'s clock, the holder may act: sent + ttl − (ttl·0.01 + 2 ms). */
    get deadline() {
        return this.#deadline;
    }
    /** Why the lease ended; undefined while it is held. */
    get reason() {
        return this.#reason;
    }
    /** Whether another caller was reported waiting for the key. */
    get isWanted() {
        return this.#isWanted;
    }
    /** Whether the lease is still held by this client's clock. */
    get held() {
        return this.#reason === undefined && now() < this.#deadline;
    }
    /** Whether auto-renew runs. */
    get autoRenew() {
        return this.#keep.renewing;
    }
    /** release frees the lock; a lease that is no longer held on the server gives NotHeldError. */
    release() {
        return this.#ops.release(this);
    }
    /**
     * renew extends the lease to ttlMs (default: its current TTL); NotHeldError
     * ends it. A session lease renews its session (every lease in it), whose
     * TTL it keeps: another ttlMs is refused (invalid_ttl).
     */
    async renew(ttlMs) {
        if (this.#reason !== undefined)
            throw new NotHeldError(`lockgate: renew ${JSON.stringify(this.key)}: the lease ended (${this.#reason})`);
        if (this.session) {
            if (ttlMs !== undefined && ttlMs !== this.session.ttlMs) {
                throw new LockgateError("invalid_ttl", `lockgate: renew ${JSON.stringify(this.key)}: a lease in a session keeps the session's TTL (${this.session.ttlMs} ms)`);
            }
            return this.session.renew();
        }
        const ttl = ttlMs ?? this.#ttlMs;
        try {
            const sent = await this.#ops.renew(this, ttl, this.signal);
            this._renewed(sent, ttl);
        }
        catch (e) {
            if (e instanceof NotHeldError)
                this._end("not_held");
            throw e;
        }
    }
    /** `await using lease = await client.acquire(k)` releases it at the end of the block (errors of an ended lease are ignored). */
    async [Symbol.asyncDispose]() {
        if (this.#reason !== undefined)
            return;
        try {
            await this.release();
        }
        catch (e) {
            if (!(e instanceof NotHeldError))
                throw e;
        }
    }
    /** @internal A renewal sent at `sent` succeeded with ttlMs. */
    _renewed(sent, ttlMs) {
        if (this.#reason !== undefined)
            return;
        this.#ttlMs = ttlMs;
        // A later answer for an older copy must not move the deadline back.
        if (deadlineOf(sent, ttlMs) > this.#deadline || sent > this.#sent) {
            this.#sent = sent;
            this.#deadline = deadlineOf(sent, ttlMs);
        }
        this.#keep.extended();
    }
    /** @internal The gateway reported a waiter for the key. */
    _markWanted() {
        if (this.#isWanted)
            return;
        this.#isWanted = true;
        this.#resolveWanted();
    }
    /** @internal Ends the lease (once). */
    _end(reason) {
        if (this.#reason !== undefined)
            return;
        this.#reason = reason;
        this.#keep.end();
        this.#ops.untrack(this);
        this.session?._remove(this);
        this.#abort.abort(new LeaseLostError(this.key, reason));
        this.#resolveLost(reason);
    }
    /** @internal Stops auto-renew (the client closed); the deadline still ends the lease. */
    _stopRenewing() {
        this.#keep.stop();
    }
}
