/**
 * Watches (the gateway's command 9): a key's holders, "synced", then every
 * grant, release and expiry, as an async iterable on one connection.
 */
import { LockgateError, WatchOverflowError, errorFromReply } from "./errors.js";
import type { Pending } from "./conn.js";
import type { Mode } from "./lease.js";
import { parseToken, type Reply } from "./wire.js";

/** How many events of one watch the client holds for a caller that does not iterate; one more ends the watch with WatchOverflowError (as the Go SDK's client.WatchBuffer). */
export const WatchBuffer = 1024;

/**
 * The kinds of watch events: "holder" (a current holder, before "synced"),
 * "synced" (the holders so far were every current one), "granted",
 * "released" and "expired" (a lease ended at its TTL).
 */
export type WatchEventType = "holder" | "synced" | "granted" | "released" | "expired";

/** One change of a watched key. */
export interface WatchEvent {
  type: WatchEventType;
  /** The key that changed: the watched key, or for a prefix watch each event's own key ("synced" carries the prefix). */
  key: string;
  /** The holder's owner (holder, granted; released and expired where the gateway says). */
  owner: string;
  /** The holder's fencing token (absent on synced). */
  fencingToken: bigint | undefined;
  /** The value stored with the lock. */
  value: string | undefined;
  mode: Mode;
  /** A semaphore's permits (0 otherwise). */
  permits: number;
  /** The backend's revision of the change (0 where it has none); increasing along a watch. */
  revision: number;
}

export interface WatchOptions {
  /** Aborting it ends the watch (unwatch on the gateway); the iteration then ends without an error. */
  signal?: AbortSignal;
  /**
   * Watch every key starting with the key ("" for every key) instead of
   * the key alone (needs the gateway's "watchprefix" feature): from the
   * moment it opens, "synced" first (no "holder" events), then every
   * grant, release and expiry under the prefix, each event with its own key.
   */
  prefix?: boolean;
}

const kinds = new Set<string>(["holder", "synced", "granted", "released", "expired"]);

/**
 * eventOf is the WatchEvent an "event" message reports; undefined for
 * anything else. key is the watched key; with prefix, the event's key is
 * the message's own (the prefix where the message has none: the "synced"
 * of the prefix "").
 */
export function eventOf(r: Reply, key: string, prefix = false): WatchEvent | undefined {
  if (r.type !== "event" || !r.event || !kinds.has(r.event)) return undefined;
  return {
    type: r.event as WatchEventType,
    key: prefix ? (r.key ?? key) : key,
    owner: r.owner ?? "",
    fencingToken: r.fencingToken === undefined ? undefined : parseToken(r.fencingToken),
    value: r.value,
    mode: r.mode === "shared" ? "shared" : "exclusive",
    permits: typeof r.permits === "number" ? r.permits : 0,
    revision: typeof r.revision === "number" ? r.revision : 0,
  };
}

/** What a Watch needs from its client. @internal */
export interface WatchOps {
  /** Ends the watch on the gateway (command 10), without waiting for the answer. */
  unwatch(): void;
  /** Stops routing the watch's messages. */
  forget(): void;
}

/**
 * Watch is an open watch: iterate it once with `for await`. It is also
 * AsyncDisposable (`await using w = await client.watch(k)`).
 */
export class Watch implements AsyncIterable<WatchEvent>, AsyncDisposable {
  /** The watched key, or the prefix of a prefix watch. */
  readonly key: string;
  /** Whether this is a prefix watch (WatchOptions.prefix). */
  readonly prefix: boolean;
  #first: Reply | undefined;
  #p: Pending;
  #ops: WatchOps;
  #ended = false;
  #stopped = false;
  #stop: Promise<null>;
  #resolveStop!: (v: null) => void;
  #unlisten: () => void = () => {};

  /** @internal */
  constructor(key: string, first: Reply, p: Pending, ops: WatchOps, stop: AbortSignal[], prefix = false) {
    this.key = key;
    this.prefix = prefix;
    this.#first = first;
    this.#p = p;
    this.#ops = ops;
    this.#stop = new Promise((res) => (this.#resolveStop = res));
    const onStop = () => this.close();
    for (const s of stop) {
      if (s.aborted) queueMicrotask(onStop);
      else s.addEventListener("abort", onStop, { once: true });
    }
    this.#unlisten = () => stop.forEach((s) => s.removeEventListener("abort", onStop));
  }

  /** close ends the watch (unwatch on the gateway); an iteration in progress ends without an error. Idempotent. */
  close(): void {
    if (this.#ended) return;
    this.#stopped = true;
    this.#end(true);
    this.#resolveStop(null);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }

  #end(unwatch: boolean): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#unlisten();
    if (unwatch) {
      try {
        this.#ops.unwatch();
      } catch {
        // the connection is gone, and the watch with it
      }
    }
    this.#ops.forget();
  }

  /** next is the next event; undefined when the watch was closed; it throws when the watch broke. */
  async next(): Promise<WatchEvent | undefined> {
    if (this.#ended) return undefined;
    if (this.#p.overflowed) {
      this.#end(true);
      throw new WatchOverflowError(`lockgate: watch ${JSON.stringify(this.key)}: watch_overflow: the caller did not take ${WatchBuffer} events in time (watch again)`);
    }
    let r: Reply | null;
    if (this.#first) {
      r = this.#first;
      this.#first = undefined;
    } else {
      r = await Promise.race([this.#p.next(), this.#stop]);
    }
    if (this.#stopped) return undefined;
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

  async *[Symbol.asyncIterator](): AsyncIterator<WatchEvent> {
    try {
      for (;;) {
        const ev = await this.next();
        if (ev === undefined) return;
        yield ev;
      }
    } finally {
      this.close(); // a consumer that breaks out ends the watch
    }
  }
}
