/**
 * Establishing a watch (the gateway's "watch" and "watchprefix"): the watch
 * request is sent until a gateway accepts it, following not_leader and
 * backing off as the request loop does; the Watch then lives on that one
 * connection.
 */
import { CancelledError, LockgateError, UnsupportedError, errorFromReply } from "./errors.js";
import { abortable, closedError, sleep } from "./calls.js";
import { Watch, WatchBuffer } from "./watch.js";
import { backoffMs } from "./timing.js";
import { Cmd, checkKey } from "./wire.js";
/**
 * watchKey is Client.watch: it resolves once the gateway has accepted the
 * watch (within requestTimeoutMs), and fails at once when the gateway does
 * not offer what it needs. @internal
 */
export async function watchKey(c, key, opts) {
    if (c.env.closed())
        throw closedError();
    const prefix = opts.prefix === true;
    if (!prefix || key !== "")
        checkKey(key); // a prefix is a key, or "" for every key
    opts.signal?.throwIfAborted();
    const what = `watch ${prefix ? "prefix " : ""}${JSON.stringify(key)}`;
    const ctl = new AbortController();
    const t = setTimeout(() => ctl.abort(new LockgateError("unavailable", `lockgate: ${what}: not established within ${c.env.requestTimeoutMs} ms`)), c.env.requestTimeoutMs);
    const stop = [c.env.closing, ...(opts.signal ? [opts.signal] : [])];
    const onStop = () => ctl.abort(opts.signal?.aborted ? new CancelledError(`lockgate: ${what}: cancelled by the caller`, opts.signal.reason) : closedError());
    for (const s of stop)
        s.addEventListener("abort", onStop, { once: true });
    let hops = 0;
    let retry = 0;
    try {
        for (;;) {
            ctl.signal.throwIfAborted();
            const conn = await abortable(c.conns.get(), ctl.signal);
            if (conn.featuresKnown && !conn.features.includes("watch")) {
                throw new UnsupportedError(`lockgate: ${what}: unsupported: the gateway ${conn.addr} does not offer "watch" (Lockgate-Features: ${conn.features.join(",") || "none"})`, "watch");
            }
            if (prefix && conn.featuresKnown && !conn.features.includes("watchprefix")) {
                throw new UnsupportedError(`lockgate: ${what}: unsupported: the gateway ${conn.addr} does not offer "watchprefix" (Lockgate-Features: ${conn.features.join(",") || "none"})`, "watchprefix");
            }
            const id = c.calls.newId();
            const p = conn.register(id);
            if (!p)
                continue;
            p.limit = WatchBuffer;
            const ops = {
                unwatch: () => conn.send({ id: c.calls.newId(), commandType: Cmd.unwatch, target: id }),
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
                        if (addr && c.conns.isDead(addr))
                            addr = "";
                        if (addr && addr !== conn.addr && hops < c.env.maxHops) {
                            hops++;
                            conn.closeFor(addr, false, new Error("not_leader"));
                            continue;
                        }
                        if (!addr)
                            conn.strike(); // no leader known here: as for unavailable, a few in a row move on
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
