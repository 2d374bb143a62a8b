/**
 * The keep-alive timer of leases and sessions, and their deadline timer.
 *
 * A lease that renews itself and a session's keep-alive follow one
 * schedule: renew ttl/3 after the TTL (re)started, retry a transient
 * failure with jittered backoff up to ttl/10 (so that a new leader is found
 * in time), each attempt bounded by the deadline, until a renewal succeeds,
 * the server says it no longer has what is renewed (the loss: it ends
 * "not_held"), or the deadline passes (it ends "expired").
 */
import { LockgateError } from "./errors.js";
import { backoffMs, now, renewDelayMs } from "./timing.js";
function unref(t) {
    t.unref?.();
}
/**
 * KeepAlive ends its target at the deadline and, while `renewing`, renews
 * it on the schedule above. Call extended() whenever the target's sent or
 * deadline moved, stop() to stop renewing, and end() once the target ended.
 * @internal
 */
export class KeepAlive {
    #target;
    #renewing;
    /** Names the target in the reason of a renewal that outlived the deadline. */
    #what;
    #deadlineTimer;
    #renewTimer;
    #inFlight;
    constructor(target, renewing, what) {
        this.#target = target;
        this.#renewing = renewing;
        this.#what = what;
    }
    /** Whether it renews. */
    get renewing() {
        return this.#renewing;
    }
    /** The target's TTL (re)started or its deadline moved: re-arm the deadline and schedule the next renewal. */
    extended() {
        this.#armDeadline();
        this.#schedule();
    }
    /** Stops renewing (the deadline still ends the target) and aborts a renewal in flight. */
    stop() {
        this.#renewing = false;
        if (this.#renewTimer)
            clearTimeout(this.#renewTimer);
        this.#renewTimer = undefined;
        this.#inFlight?.abort();
    }
    /** The target ended: every timer stops. */
    end() {
        this.stop();
        if (this.#deadlineTimer)
            clearTimeout(this.#deadlineTimer);
        this.#deadlineTimer = undefined;
    }
    #armDeadline() {
        if (this.#deadlineTimer)
            clearTimeout(this.#deadlineTimer);
        const fire = () => {
            const left = this.#target.deadline - now();
            if (left > 0) {
                this.#deadlineTimer = setTimeout(fire, left + 1);
                unref(this.#deadlineTimer);
                return;
            }
            this.#target.end("expired");
        };
        this.#deadlineTimer = setTimeout(fire, Math.max(0, this.#target.deadline - now()));
        unref(this.#deadlineTimer);
    }
    #schedule() {
        const t = this.#target;
        if (!this.#renewing || t.reason !== undefined)
            return;
        if (this.#renewTimer)
            clearTimeout(this.#renewTimer);
        const at = t.sent + renewDelayMs(t.ttlMs);
        this.#renewTimer = setTimeout(() => void this.#round(), Math.max(0, at - now()));
        unref(this.#renewTimer);
    }
    /**
     * One round: renew until it succeeds, the server says the target is gone
     * (it ends "not_held"), or the deadline passes (the deadline timer ends
     * it). Each attempt is bounded by the deadline: past it, a renewal could
     * not make the holder safe again.
     */
    async #round() {
        const t = this.#target;
        this.#renewTimer = undefined;
        for (let attempt = 1; this.#renewing && t.reason === undefined; attempt++) {
            const left = t.deadline - now();
            if (left <= 0)
                return; // the deadline timer ends it
            const ctl = new AbortController();
            this.#inFlight = ctl;
            const timer = setTimeout(() => ctl.abort(new LockgateError("timeout", `${this.#what} outlived the deadline`)), left);
            unref(timer);
            try {
                const sent = await t.renewOnce(ctl.signal);
                t.renewed(sent);
                return;
            }
            catch (e) {
                if (t.isLoss(e)) {
                    t.end("not_held");
                    return;
                }
                if (e instanceof LockgateError && e.code === "closed")
                    return;
            }
            finally {
                clearTimeout(timer);
                if (this.#inFlight === ctl)
                    this.#inFlight = undefined;
            }
            await new Promise((res) => {
                const p = setTimeout(res, backoffMs(attempt, 50, Math.max(50, t.ttlMs / 10)));
                unref(p);
            });
        }
    }
}
