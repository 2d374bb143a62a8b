/**
 * The client's connection: one WebSocket to a gateway, opened on demand to
 * a random endpoint and replaced when it fails. not_leader with the
 * leader's address moves it there, `closed` and a connection that drops
 * move it elsewhere with backoff (50 ms doubling to 2 s, full jitter); an
 * address whose dial just failed is not followed for DeadForMs.
 */
import { LockgateError } from "./errors.js";
import { Conn } from "./conn.js";
import { sleep, closedError } from "./calls.js";
import { dial, wsUrl } from "./socket.js";
import { backoffMs, now } from "./timing.js";
/** A redirect to an address whose dial failed less than this long ago is not followed. */
const DeadForMs = 1_000;
/** The connection of a Client. @internal */
export class Connection {
    env;
    onWanted;
    endpoints;
    secure;
    dialTimeoutMs;
    tls;
    token;
    webSocket;
    conn;
    connecting;
    next = ""; // a redirect target, dialled next without backoff
    avoid = ""; // the gateway that just failed us
    attempt = 0; // consecutive failed connects
    dead = new Map(); // addresses whose last dial failed, and when
    dialErr;
    // What the last gateway announced (Lockgate-Features: wanted); the lease
    // cache keeps leases only when it did.
    signalsWanted = false;
    constructor(env, o, 
    /** Receives the gateway's "wanted" pushes. */
    onWanted) {
        this.env = env;
        this.onWanted = onWanted;
        this.endpoints = o.endpoints;
        this.secure = o.secure;
        this.dialTimeoutMs = o.dialTimeoutMs;
        this.tls = o.tls;
        this.token = o.token;
        this.webSocket = o.webSocket;
    }
    isDead(addr) {
        const at = this.dead.get(addr);
        return at !== undefined && now() - at < DeadForMs;
    }
    /** get is the live connection, connecting (with backoff) when there is none. */
    get() {
        if (this.env.closed())
            return Promise.reject(closedError());
        if (this.conn && !this.conn.closed)
            return Promise.resolve(this.conn);
        this.connecting ??= this.connect().finally(() => (this.connecting = undefined));
        return this.connecting;
    }
    async connect() {
        const old = this.conn;
        if (old) {
            this.conn = undefined;
            // Learn from how the last connection ended.
            this.avoid = old.avoid ? old.addr : "";
            if (old.redirect)
                this.next = old.redirect;
            else if (old.useful || now() - old.born > 10_000)
                this.attempt = 0; // it worked: reconnect at once
            else
                this.attempt++;
            if (!old.redirect)
                this.env.log(`connection to ${old.addr} lost: ${old.cause?.message ?? "closed"}`);
        }
        for (;;) {
            if (this.env.closed())
                throw closedError();
            let addr = this.next;
            this.next = "";
            if (!addr) {
                if (this.attempt > 0)
                    await sleep(backoffMs(this.attempt), this.env.closing);
                addr = this.pick(this.avoid);
            }
            try {
                const conn = await this.dial(addr);
                this.dialErr = undefined;
                this.dead.delete(addr);
                this.conn = conn;
                this.signalsWanted = conn.wantedFeature;
                this.env.log(`connected to ${conn.addr}`);
                if (this.env.closed())
                    conn.close(new Error("client closed"), 1000);
                return conn;
            }
            catch (e) {
                if (e instanceof LockgateError && e.code === "unauthorized")
                    throw e;
                this.dialErr = e;
                this.dead.set(addr, now());
                this.avoid = addr;
                this.attempt++;
                this.env.log(`connect to ${addr} failed (attempt ${this.attempt}): ${e.message}`);
            }
        }
    }
    /** dial connects to addr, following handshake redirects (421 body, 307 Location) for at most maxHops hops. */
    async dial(addr) {
        for (let hop = 0;; hop++) {
            const res = await dial(wsUrl(addr, this.secure), {
                timeoutMs: this.dialTimeoutMs,
                ...(this.token !== undefined ? { token: this.token } : {}),
                ...(this.tls !== undefined ? { tls: this.tls } : {}),
                ...(this.webSocket !== undefined ? { webSocket: this.webSocket } : {}),
            });
            if ("redirect" in res) {
                if (!res.redirect || res.redirect === addr || hop >= this.env.maxHops) {
                    throw new LockgateError("unavailable", `lockgate: dial ${addr}: redirected (to ${res.redirect || "nobody"}) too often`);
                }
                this.env.log(`handshake redirected from ${addr} to ${res.redirect}`);
                addr = res.redirect;
                continue;
            }
            return new Conn(res, addr, (r) => this.onWanted(r), (m) => this.env.log(m));
        }
    }
    pick(avoid) {
        const n = this.endpoints.length;
        let i = Math.floor(Math.random() * n);
        if (n > 1 && this.endpoints[i] === avoid)
            i = (i + 1 + Math.floor(Math.random() * (n - 1))) % n;
        return this.endpoints[i];
    }
}
