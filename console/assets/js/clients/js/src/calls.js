/**
 * The request loop: one logical request (a Call) sent once per connection
 * attempt, each copy with a fresh id, until it gets an answer that is not a
 * transient failure. Dropped connections, not_leader redirects, closed
 * gateways and unavailable answers are retried (redirects at once, the
 * rest with backoff); a request given up is abandoned so that the caller is
 * never left holding a lock it did not get.
 */
import { LockgateError, UnsupportedError, errorFromReply } from "./errors.js";
import { BackoffBaseMs, BackoffMaxMs, backoffMs, now } from "./timing.js";
import { Cmd } from "./wire.js";
export function closedError() {
    return new LockgateError("closed", "lockgate: the client is closed");
}
export function newCall(op, req, extra = {}) {
    return { op, req, sends: 0, first: 0, last: 0, prior: false, ...extra };
}
/** sleep waits ms; it rejects with the signal's reason when aborted first. */
export function sleep(ms, signal) {
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
export function abortable(p, signal) {
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
/** The request loop of a Client. @internal */
export class Calls {
    env;
    conns;
    nextId = 0;
    constructor(env, conns) {
        this.env = env;
        this.conns = conns;
    }
    newId() {
        return (++this.nextId).toString(36);
    }
    /** oneShot runs a call bounded by requestTimeoutMs (and signal, and close). */
    async oneShot(k, signal) {
        const ctl = new AbortController();
        const t = setTimeout(() => ctl.abort(this.noAnswer(k)), this.env.requestTimeoutMs);
        const onAbort = () => ctl.abort(signal.reason);
        const onClose = () => ctl.abort(closedError());
        if (signal?.aborted)
            onAbort();
        signal?.addEventListener("abort", onAbort, { once: true });
        this.env.closing.addEventListener("abort", onClose, { once: true });
        try {
            return await this.do(k, ctl.signal);
        }
        finally {
            clearTimeout(t);
            signal?.removeEventListener("abort", onAbort);
            this.env.closing.removeEventListener("abort", onClose);
        }
    }
    what(k) {
        return JSON.stringify(k.req.key ?? k.req.keys ?? "");
    }
    noAnswer(k) {
        const why = this.conns.dialErr ? ` (last dial: ${this.conns.dialErr.message})` : "";
        return new LockgateError("unavailable", `lockgate: ${k.op} ${this.what(k)}: no answer within ${this.env.requestTimeoutMs} ms${why}`);
    }
    unexpected(r, k, want) {
        const what = `${k.op} ${this.what(k)}`;
        if (r.type === "error")
            return errorFromReply(r.error, what);
        return new LockgateError("internal", `lockgate: ${what}: answered ${JSON.stringify(r.type)} where ${JSON.stringify(want)} was expected`);
    }
    /**
     * do sends k and returns the first answer that is not a transient
     * failure. Dropped connections, not_leader redirects, closed gateways and
     * unavailable answers are retried (redirects at once, the rest with
     * backoff) until signal aborts; then it throws the signal's reason, after
     * cancelling a waiting acquire on the gateway. MaxStrikes unavailable
     * answers, or not_leader answers naming no leader, in a row move the
     * connection to another endpoint.
     */
    async do(k, signal) {
        let hops = 0;
        let retry = 0;
        for (;;) {
            signal.throwIfAborted();
            const conn = await abortable(this.conns.get(), signal);
            if (k.needs && conn.featuresKnown) {
                const missing = k.needs.find((f) => !conn.features.includes(f));
                if (missing !== undefined) {
                    throw new UnsupportedError(`lockgate: ${k.op} ${this.what(k)}: unsupported: the gateway ${conn.addr} does not offer ${JSON.stringify(missing)} (Lockgate-Features: ${conn.features.join(",") || "none"})`, missing);
                }
            }
            const id = this.newId();
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
                r = await abortable(this.answer(p), signal);
            }
            catch (e) {
                await this.abandon(conn, id, p, k);
                throw e;
            }
            conn.unregister(id);
            if (r === null) {
                k.prior = true;
                this.env.log(`re-sending ${k.op} ${k.req.key} after a dropped connection to ${conn.addr}`);
                continue;
            }
            switch (r.error?.code) {
                case "not_leader": {
                    let addr = r.error.leader?.addr ?? "";
                    if (addr && this.conns.isDead(addr))
                        addr = ""; // just failed to answer a dial: as if unknown
                    if (addr) {
                        if (hops < this.env.maxHops) {
                            hops++;
                            if (addr !== conn.addr) {
                                // Every request on this connection would be redirected too: move it.
                                this.env.log(`redirected from ${conn.addr} to the leader at ${addr}`);
                                conn.closeFor(addr, false, new Error("not_leader"));
                                continue;
                            }
                            // The named leader is this node, not ready yet: back off.
                        }
                        else if (!k.wait) {
                            throw errorFromReply(r.error, `${k.op} ${this.what(k)}`);
                        }
                        else {
                            hops = 0; // a waiting acquire keeps looking, after a pause
                        }
                    }
                    else {
                        // This node knows no leader: an election, or a leader cut off
                        // from its quorum that stepped down, which may last. Nothing
                        // was done (k.prior stays); like unavailable, a few in a row
                        // move the client to another endpoint.
                        conn.strike();
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
                    this.env.log(`${k.op} ${this.what(k)} rate-limited by ${conn.addr}; sending it again in ${ms} ms`);
                    await sleep(ms, signal);
                    continue;
                }
            }
            conn.good();
            return r;
        }
    }
    /** answer is the next reply that is not an interim "queued" (null: the connection dropped). */
    async answer(p) {
        for (;;) {
            const r = await p.next();
            if (r === null || r.type !== "queued")
                return r;
        }
    }
    /**
     * abandon gives up the copy of k sent on conn as id. A waiting acquire is
     * cancelled on the gateway (command 6) and its final answer awaited: a
     * grant that raced with the cancel is released, so the caller is never
     * left holding a lock it did not get. A try-acquire's answer is awaited
     * in the background for the same reason.
     */
    async abandon(conn, id, p, k) {
        if (!k.grantable) {
            conn.unregister(id);
            return;
        }
        const settle = async () => {
            try {
                const r = await Promise.race([this.answer(p), sleep(this.env.requestTimeoutMs).then(() => "timeout")]);
                if (r === "timeout") {
                    this.env.log(`no answer to a cancelled ${k.op} of ${k.req.key}; closing the connection so that the gateway drops the wait`);
                    conn.close(new Error("cancelled acquire never answered"));
                }
                else if (r?.type === "grant") {
                    await this.releaseRaced(conn, r);
                }
                else if (r?.type === "grants") {
                    for (const g of r.leases ?? []) {
                        if (g.key && g.lockToken)
                            await this.releaseRaced(conn, { type: "grant", key: g.key, lockToken: g.lockToken, fencingToken: g.fencingToken ?? 0n });
                    }
                }
                else if (r === null) {
                    this.env.log(`connection lost while giving up ${k.op} of ${k.req.key}; a grant that raced in stays held until its TTL`);
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
            conn.send({ id: this.newId(), commandType: Cmd.cancel, target: id });
        }
        catch (e) {
            this.env.log(`could not send the cancel of ${k.op} ${k.req.key}: ${e.message}`);
        }
        await settle();
    }
    /** releaseRaced releases a grant that arrived for a request its caller gave up. */
    async releaseRaced(conn, r) {
        const req = {
            commandType: Cmd.release, key: r.key, lockToken: r.lockToken, fencingToken: { key: r.key, value: r.fencingToken ?? 0n }, ack: true,
        };
        const id = this.newId();
        const p = conn?.register(id);
        if (conn && p) {
            try {
                conn.send({ ...req, id });
                const a = await Promise.race([this.answer(p), sleep(this.env.requestTimeoutMs).then(() => null)]);
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
        if (this.env.closed()) {
            this.env.log(`could not release a grant of ${r.key} that raced with giving up; it stays held until its TTL`);
            return;
        }
        try {
            const a = await this.oneShot(newCall("release", req));
            if (a.type === "released" || a.error?.code === "not_held")
                return;
        }
        catch {
            // logged below
        }
        this.env.log(`could not release a grant of ${r.key} that raced with giving up; it stays held until its TTL`);
    }
}
