import { LockgateError } from "./errors.js";
import { DefaultTtlMs } from "./wire.js";
/** A won election: the leader's exclusive, auto-renewed lease on the key. */
export class Leadership {
    key;
    lease;
    constructor(lease) {
        this.key = lease.key;
        this.lease = lease;
    }
    /** The term's fencing token: send it with every write. */
    get fencingToken() {
        return this.lease.fencingToken;
    }
    /** Aborted when leadership is lost (expired, a refused renewal) or resigned. */
    get signal() {
        return this.lease.signal;
    }
    /** Resolves with why leadership ended. */
    get lost() {
        return this.lease.lost;
    }
    /** resign gives leadership up: the key is released and the next campaigner leads. NotHeldError if it was already lost. */
    resign() {
        return this.lease.release();
    }
}
/** campaign waits until the caller leads the election of key (an exclusive, auto-renewed acquire with value stored beside it). */
export async function campaign(client, key, value, opts = {}) {
    const lease = await client.acquire(key, {
        ttlMs: opts.ttlMs ?? DefaultTtlMs,
        autoRenew: true,
        value,
        ...(opts.clientId !== undefined ? { clientId: opts.clientId } : {}),
        ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return new Leadership(lease);
}
/** current reports the election's leader now (present false when none). */
export async function current(client, key, opts = {}) {
    const info = await client.inspect(key, opts);
    if (!info)
        return none(key, 0);
    return { key, present: true, owner: info.owner, value: info.value, fencingToken: info.fencingToken ?? 0n, revision: 0 };
}
function none(key, revision) {
    return { key, present: false, owner: "", value: undefined, fencingToken: 0n, revision };
}
function leaderOf(ev) {
    return { key: ev.key, present: true, owner: ev.owner, value: ev.value, fencingToken: ev.fencingToken ?? 0n, revision: ev.revision };
}
const RewatchMinMs = 50;
const RewatchMaxMs = 2_000;
function pause(ms, signal) {
    return new Promise((res) => {
        if (signal?.aborted)
            return res(false);
        const t = setTimeout(() => {
            signal?.removeEventListener("abort", f);
            res(true);
        }, ms);
        const f = () => {
            clearTimeout(t);
            res(false);
        };
        signal?.addEventListener("abort", f, { once: true });
    });
}
/**
 * observe streams the election's leader: the current one (or one with
 * present false) once the watch is in sync, then each change in order — a
 * new leader, or none when the leader resigned or expired. When the watch
 * breaks (connection lost, leader change of the service, watch_overflow)
 * it watches again, with backoff from 50 ms to 2 s, without repeating a
 * leader already sent (de-duplicated by token); a leader that came and
 * went meanwhile is not seen. The iteration ends when opts.signal aborts or
 * the client closes; the first watch's failure (unsupported: the gateway
 * has no watches) is thrown.
 */
export async function* observe(client, key, opts = {}) {
    let w = await client.watch(key, opts);
    let cur; // the leader last sent
    let top = 0n; // the highest leader token sent
    let synced = false;
    let holder;
    let backoff = RewatchMinMs;
    const fresh = (ld) => {
        if (cur && !ld.present && !cur.present)
            return false; // still nobody (a re-watch's sync)
        if (cur && ld.present && ld.fencingToken <= top)
            return false; // sent already, or older
        cur = ld;
        if (ld.fencingToken > top)
            top = ld.fencingToken;
        return true;
    };
    try {
        for (;;) {
            let ev;
            try {
                ev = await w.next();
            }
            catch {
                if (opts.signal?.aborted)
                    return;
                for (;;) {
                    if (!(await pause(backoff, opts.signal)))
                        return;
                    backoff = Math.min(2 * backoff, RewatchMaxMs);
                    try {
                        w = await client.watch(key, opts);
                        break;
                    }
                    catch (e) {
                        if (opts.signal?.aborted)
                            return;
                        if (e instanceof LockgateError && (e.code === "closed" || e.code === "unsupported"))
                            return;
                    }
                }
                synced = false;
                holder = undefined;
                continue;
            }
            if (ev === undefined)
                return; // closed: the signal, or the client
            switch (ev.type) {
                case "holder":
                    holder ??= ev; // the oldest holder leads
                    break;
                case "synced": {
                    synced = true;
                    backoff = RewatchMinMs;
                    const ld = holder ? leaderOf(holder) : none(key, ev.revision);
                    if (fresh(ld))
                        yield ld;
                    break;
                }
                case "granted": {
                    const ld = leaderOf(ev);
                    if (synced && fresh(ld))
                        yield ld;
                    break;
                }
                case "released":
                case "expired":
                    if (synced && cur?.present && ev.fencingToken === cur.fencingToken) {
                        const ld = none(key, ev.revision);
                        if (fresh(ld))
                            yield ld;
                    }
                    break;
            }
        }
    }
    finally {
        w.close();
    }
}
