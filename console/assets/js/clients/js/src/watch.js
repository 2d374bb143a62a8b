/**
 * Watches (the gateway's command 9): a key's holders, "synced", then every
 * grant, release and expiry, as an async iterable on one connection.
 */
import { LockgateError, WatchOverflowError, errorFromReply } from "./errors.js";
import { parseToken } from "./wire.js";
/** How many events of one watch the client holds for a caller that does not iterate; one more ends the watch with WatchOverflowError (as the Go SDK's client.WatchBuffer). */
export const WatchBuffer = 1024;
const kinds = new Set(["holder", "synced", "granted", "released", "expired"]);
/**
 * eventOf is the WatchEvent an "event" message reports; undefined for
 * anything else. key is the watched key; with prefix, the event's key is
 * the message's own (the prefix where the message has none: the "synced"
 * of the prefix "").
 */
export function eventOf(r, key, prefix = false) {
    if (r.type !== "event" || !r.event || !kinds.has(r.event))
        return undefined;
    return {
        type: r.event,
        key: prefix ? (r.key ?? key) : key,
        owner: r.owner ?? "",
        fencingToken: r.fencingToken === undefined ? undefined : parseToken(r.fencingToken),
        value: r.value,
        mode: r.mode === "shared" ? "shared" : "exclusive",
        permits: typeof r.permits === "number" ? r.permits : 0,
        revision: typeof r.revision === "number" ? r.revision : 0,
    };
}
/**
 * Watch is an open watch: iterate it once with `for await`. It is also
 * AsyncDisposable (`await using w = await client.watch(k)`).
 */
export class Watch {
    /** The watched key, or the prefix of a prefix watch. */
    key;
    /** Whether this is a prefix watch (WatchOptions.prefix). */
    prefix;
    #first;
    #p;
    #ops;
    #ended = false;
    #stopped = false;
    #stop;
    #resolveStop;
    #unlisten = () => { };
    /** @internal */
    constructor(key, first, p, ops, stop, prefix = false) {
        this.key = key;
        this.prefix = prefix;
        this.#first = first;
        this.#p = p;
        this.#ops = ops;
        this.#stop = new Promise((res) => (this.#resolveStop = res));
        const onStop = () => this.close();
        for (const s of stop) {
            if (s.aborted)
                queueMicrotask(onStop);
            else
                s.addEventListener("abort", onStop, { once: true });
        }
        this.#unlisten = () => stop.forEach((s) => s.removeEventListener("abort", onStop));
    }
    /** close ends the watch (unwatch on the gateway); an iteration in progress ends without an error. Idempotent. */
    close() {
        if (this.#ended)
            return;
        this.#stopped = true;
        this.#end(true);
        this.#resolveStop(null);
    }
    async [Symbol.asyncDispose]() {
        this.close();
    }
    #end(unwatch) {
        if (this.#ended)
            return;
        this.#ended = true;
        this.#unlisten();
        if (unwatch) {
            try {
                this.#ops.unwatch();
            }
            catch {
                // the connection is gone, and the watch with it
            }
        }
        this.#ops.forget();
    }
    /** next is the next event; undefined when the watch was closed; it throws when the watch broke. */
    async next() {
        if (this.#ended)
            return undefined;
        if (this.#p.overflowed) {
            this.#end(true);
            throw new WatchOverflowError(`lockgate: watch ${JSON.stringify(this.key)}: watch_overflow: the caller did not take ${WatchBuffer} events in time (watch again)`);
        }
        let r;
        if (this.#first) {
            r = this.#first;
            this.#first = undefined;
        }
        else {
            r = await Promise.race([this.#p.next(), this.#stop]);
        }
        if (this.#stopped)
            return undefined;
        if (r === null) {
            this.#end(false);
            throw new LockgateError("unavailable", `lockgate: watch ${JSON.stringify(this.key)}: the connection was lost (watch again)`);
        }
        if (r.type === "error" || r.event === "error") {
            this.#end(false);
            throw errorFromReply(r.error, `watch ${JSON.stringify(this.key)}`);
        }
        const ev = eventOf(r, this.key, this.prefix);
        if (!ev) {
            this.#end(true);
            throw new LockgateError("unavailable", `lockgate: watch ${JSON.stringify(this.key)}: the gateway sent ${JSON.stringify(r.type)}/${JSON.stringify(r.event)}`);
        }
        return ev;
    }
    async *[Symbol.asyncIterator]() {
        try {
            for (;;) {
                const ev = await this.next();
                if (ev === undefined)
                    return;
                yield ev;
            }
        }
        finally {
            this.close(); // a consumer that breaks out ends the watch
        }
    }
}
