/**
 * Sessions: many leases kept alive by one keep-alive. A
 * session's leases share its TTL and its deadline; one renewSession
 * (command 12) renews them all on the server, whatever their number. A
 * session that ends — its keep-alive refused (session_expired), its
 * deadline passed, or closed — ends every lease in it.
 *
 * Deadline rule (the lease's, applied to the session): a session lease's
 * deadline is the session's, sent + ttl − (ttl·0.01 + 2 ms), sent being
 * the send time of the last openSession or renewSession that succeeded.
 * Acquiring a lease in a session does not move the session's deadline.
 */
import { LockgateError, SessionExpiredError } from "./errors.js";
import { KeepAlive } from "./keepalive.js";
import { deadlineOf, now } from "./timing.js";
/** SessionLostError is the reason of a session's `signal` once it ends. */
export class SessionLostError extends LockgateError {
    name = "SessionLostError";
    reason;
    constructor(id, reason) {
        super("not_held", `lockgate: session ${id.slice(0, 8)}… ended: ${reason}`);
        this.reason = reason;
    }
}
/**
 * Session is a group of leases kept alive together: acquire with
 * `{ session }` puts a lease in it. Its `signal` aborts when it ends, and
 * every lease of it ends with the same reason: "expired" (the deadline
 * passed without a successful keep-alive), "not_held" (the server refused
 * a keep-alive: the session was gone) or "released" (closed).
 */
export class Session {
    /** The server's secret id of the session: whoever knows it can renew and close it. */
    id;
    /** The client id the session was opened for. */
    owner;
    /** The session's TTL (and every lease's in it), ms. */
    ttlMs;
    /** Aborted once the session ends (reason: a SessionLostError). */
    signal;
    /** Resolves with the reason once the session ends (it never rejects). */
    ended;
    #ops;
    #sent;
    #deadline;
    #reason;
    #leases = new Set();
    #abort = new AbortController();
    #resolveEnded;
    /** The deadline timer and, with keepAlive, the renewals (keepalive.ts, as a lease's auto-renew). */
    #keep;
    #renewals = 0;
    /** @internal */
    constructor(ops, init) {
        this.#ops = ops;
        this.id = init.id;
        this.owner = init.owner;
        this.ttlMs = init.ttlMs;
        this.#sent = init.sent;
        this.#deadline = deadlineOf(init.sent, init.ttlMs);
        this.signal = this.#abort.signal;
        this.ended = new Promise((res) => (this.#resolveEnded = res));
        const session = this;
        this.#keep = new KeepAlive({
            ttlMs: this.ttlMs,
            get sent() {
                return session.#sent;
            },
            get deadline() {
                return session.#deadline;
            },
            get reason() {
                return session.#reason;
            },
            renewOnce: (signal) => this.#ops.renew(this, signal),
            renewed: (sent) => void this._extend(sent),
            isLoss: (e) => e instanceof SessionExpiredError || (e instanceof LockgateError && e.code === "not_held"),
            end: (reason) => this._end(reason),
        }, init.keepAlive, "keep-alive");
        this.#keep.extended();
    }
    /** When the request that started the current TTL was sent (performance.now() ms). */
    get sent() {
        return this.#sent;
    }
    /** The last instant (performance.now() ms) a holder of a lease in the session may act. */
    get deadline() {
        return this.#deadline;
    }
    /** Why the session ended; undefined while it lives. */
    get reason() {
        return this.#reason;
    }
    /** Whether the session lives by this client's clock. */
    get alive() {
        return this.#reason === undefined && now() < this.#deadline;
    }
    /** How many live leases the session holds. */
    get leases() {
        return this.#leases.size;
    }
    /** Keep-alives that succeeded (automatic and explicit). */
    get renewals() {
        return this.#renewals;
    }
    /** Whether the session renews itself every ttl/3. */
    get keepAlive() {
        return this.#keep.renewing;
    }
    /** One keep-alive now: the session and every lease in it live ttl from this request. SessionExpiredError ends them. */
    async renew() {
        if (this.#reason !== undefined)
            throw new SessionExpiredError(`lockgate: renew session: it ended (${this.#reason})`);
        const sent = await this.#ops.renew(this, this.signal);
        this._extend(sent);
    }
    /** close ends the session on the server: every lease in it is released (reason "released"). */
    close() {
        return this.#ops.close(this);
    }
    /** Stops the keep-alive: the session and its leases then end at its deadline unless renewed. */
    stopKeepAlive() {
        this.#keep.stop();
    }
    /** @internal Puts a lease in the session; false when the session has ended. */
    _add(lease) {
        if (this.#reason !== undefined)
            return false;
        this.#leases.add(lease);
        return true;
    }
    /** @internal An ended lease leaves the session. */
    _remove(lease) {
        this.#leases.delete(lease);
    }
    /** @internal A keep-alive sent at `sent` succeeded: the session and its leases live ttl from it. */
    _extend(sent) {
        if (this.#reason !== undefined)
            return false;
        this.#renewals++;
        // An answer for an older copy never moves the deadline back.
        if (deadlineOf(sent, this.ttlMs) > this.#deadline) {
            this.#sent = sent;
            this.#deadline = deadlineOf(sent, this.ttlMs);
        }
        for (const l of this.#leases)
            l._renewed(this.#sent, this.ttlMs);
        this.#keep.extended();
        return true;
    }
    /** @internal Ends the session and every lease in it (once). */
    _end(reason) {
        if (this.#reason !== undefined)
            return;
        this.#reason = reason;
        this.#keep.end();
        const leases = [...this.#leases];
        this.#leases.clear();
        for (const l of leases)
            l._end(reason);
        this.#ops.forget(this);
        this.#abort.abort(new SessionLostError(this.id, reason));
        this.#resolveEnded(reason);
    }
}
