/**
 * One connection to a gateway: requests multiplexed by id, replies handed
 * to the request that waits for them, liveness by ping.
 */
import { decodeReply, encodeRequest } from "./wire.js";
/**
 * Liveness: the client pings every PingIntervalMs and drops a connection
 * on which nothing (a message, a pong, a ping) arrived for IdleTimeoutMs, so
 * that a gateway that vanished without closing TCP is noticed and its
 * requests re-sent elsewhere. Only where the platform can ping (Node's
 * `ws`); a browser relies on the server's pings and its TCP stack.
 */
export const PingIntervalMs = 5_000;
export const IdleTimeoutMs = 15_000;
/** MaxStrikes: consecutive unavailable answers, or not_leader answers naming no leader, before the client tries another gateway. */
export const MaxStrikes = 3;
/** Pending collects the replies to one request id. next() yields them in order; null once the connection ended. */
export class Pending {
    #queue = [];
    /** A watch's bound: past `limit` queued replies, onOverflow is called (once) and later replies are dropped. */
    limit = Infinity;
    onOverflow;
    #over = false;
    #waiter;
    #ended = false;
    push(r) {
        if (this.#waiter) {
            const w = this.#waiter;
            this.#waiter = undefined;
            w.resolve(r);
        }
        else if (this.#queue.length < this.limit) {
            this.#queue.push(r);
        }
        else if (!this.#over) {
            this.#over = true;
            this.onOverflow?.();
        }
    }
    /** Whether the queue overflowed its limit. */
    get overflowed() {
        return this.#over;
    }
    end() {
        this.#ended = true;
        if (this.#waiter) {
            const w = this.#waiter;
            this.#waiter = undefined;
            w.resolve(null);
        }
    }
    /** next is the next reply, or null when the connection ended first. Calling it again before it settles returns the same promise. */
    next() {
        const r = this.#queue.shift();
        if (r)
            return Promise.resolve(r);
        if (this.#ended)
            return Promise.resolve(null);
        if (!this.#waiter) {
            let resolve;
            const promise = new Promise((res) => (resolve = res));
            this.#waiter = { promise, resolve };
        }
        return this.#waiter.promise;
    }
}
export class Conn {
    onPush;
    onWarn;
    addr;
    born = performance.now();
    wantedFeature;
    /** The gateway's Lockgate-Features, and whether they could be read (not in browsers). */
    features;
    featuresKnown;
    /** Resolves when the connection has ended. */
    done;
    closed = false;
    cause;
    /** Set by closeFor: dial this address next (a not_leader redirect). */
    redirect = "";
    /** Set by closeFor: prefer another gateway next. */
    avoid = false;
    /** It answered a request normally. */
    useful = false;
    #sock;
    #pending = new Map();
    #strikes = 0;
    #lastActivity = performance.now();
    #pinger;
    #resolveDone;
    constructor(sock, addr, onPush, onWarn) {
        this.onPush = onPush;
        this.onWarn = onWarn;
        this.#sock = sock;
        this.addr = addr;
        this.wantedFeature = sock.features.includes("wanted");
        this.features = [...sock.features];
        this.featuresKnown = sock.featuresKnown;
        this.done = new Promise((res) => (this.#resolveDone = res));
        sock.onactivity = () => (this.#lastActivity = performance.now());
        sock.onmessage = (text) => this.#dispatch(text);
        sock.onclose = (cause) => this.#ended(cause);
        if (sock.ping()) {
            this.#pinger = setInterval(() => {
                if (performance.now() - this.#lastActivity > IdleTimeoutMs) {
                    this.close(new Error(`nothing received for ${IdleTimeoutMs} ms`));
                    return;
                }
                sock.ping();
            }, PingIntervalMs);
            this.#pinger.unref?.();
        }
    }
    #dispatch(text) {
        let r;
        try {
            r = decodeReply(text);
        }
        catch (e) {
            this.onWarn(`undecodable message from ${this.addr}: ${e.message}`);
            return;
        }
        if (!r.id) {
            if (r.type === "wanted")
                this.onPush(r);
            else if (r.type === "error")
                this.onWarn(`gateway error without request id: ${r.error?.code}: ${r.error?.message}`);
            return;
        }
        this.#pending.get(r.id)?.push(r); // none: a request that gave up (e.g. the reply to a cancel)
    }
    #ended(cause) {
        if (!this.cause)
            this.cause = cause;
        this.closed = true;
        if (this.#pinger)
            clearInterval(this.#pinger);
        for (const p of this.#pending.values())
            p.end();
        this.#pending.clear();
        this.#resolveDone();
    }
    /** register makes a Pending receive the replies with id; undefined once the connection has ended. */
    register(id) {
        if (this.closed)
            return undefined;
        const p = new Pending();
        this.#pending.set(id, p);
        return p;
    }
    unregister(id) {
        this.#pending.delete(id);
    }
    /** send writes one request; it throws (and ends the connection) if it cannot. */
    send(req) {
        if (this.closed)
            throw new Error("connection closed");
        try {
            this.#sock.send(encodeRequest(req));
        }
        catch (e) {
            this.close(e);
            throw e;
        }
    }
    /** close ends the connection at once. */
    close(cause, code) {
        if (this.closed)
            return;
        this.cause = cause;
        try {
            this.#sock.close(code, code ? cause.message.slice(0, 120) : undefined);
        }
        catch {
            // already closing
        }
        // ws's terminate reports close asynchronously; mark it ended now so
        // that no request is written to a connection on its way out.
        this.#ended(cause);
    }
    /** closeFor ends the connection so that the client dials redirect next, or with avoid some other gateway. */
    closeFor(redirect, avoid, cause) {
        if (!this.closed) {
            this.redirect = redirect;
            this.avoid = avoid;
        }
        this.close(cause);
    }
    /** strike counts an unavailable answer or a not_leader naming no leader; after MaxStrikes in a row another gateway is tried. */
    strike() {
        if (++this.#strikes >= MaxStrikes)
            this.closeFor("", true, new Error("gateway keeps answering unavailable or not_leader without a leader"));
    }
    good() {
        this.#strikes = 0;
        this.useful = true;
    }
}
