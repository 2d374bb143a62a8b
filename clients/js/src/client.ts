/**
 * Client: a lockgate client over the WebSocket protocol (docs/protocol.md,
 * v1), the TypeScript counterpart of the Go SDK (client/).
 *
 * One WebSocket connection carries every request, multiplexed by id. It is
 * opened on demand to a random endpoint and replaced when it fails:
 * not_leader with the leader's address moves it there (at most maxHops
 * hops per request), `closed` and a connection that drops move it
 * elsewhere with backoff (50 ms doubling to 2 s, full jitter), and every
 * request that was waiting on it is re-sent — an acquire with the same
 * client-chosen lockToken, so that on raftlock a copy that was already
 * granted returns that grant instead of queueing behind it.
 */
import { LockgateError } from "./errors.js";
import type { CacheStats } from "./cache.js";
import { DefaultCacheIdleMs, DefaultMaxCachedLeases } from "./cache.js";
import { abortable, closedError, sleep, Calls, type Env } from "./calls.js";
import { Connection } from "./connection.js";
import type { HolderInfo } from "./errors.js";
import type { Lease } from "./lease.js";
import { Leases } from "./leases.js";
import {
  DefaultDialTimeoutMs,
  DefaultMaxHops,
  DefaultRequestTimeoutMs,
  DefaultSessionRetryMs,
  type AcquireOptions,
  type ClientOptions,
  type LockInfo,
  type SessionOptions,
  type SessionStats,
} from "./options.js";
import { acquireAll } from "./primitives.js";
import type { Session } from "./session.js";
import { Sessions } from "./sessions.js";
import { wsUrl } from "./socket.js";
import type { Watch, WatchOptions } from "./watch.js";
import { watchKey } from "./watching.js";
import { checkOwner, checkTtl, newHandle } from "./wire.js";

export { DefaultDialTimeoutMs, DefaultMaxHops, DefaultRequestTimeoutMs, DefaultSessionRetryMs } from "./options.js";
export type { AcquireOptions, ClientOptions, HolderDetail, LockInfo, SessionOptions, SessionStats } from "./options.js";

/**
 * Client is the facade: its parts (connection.ts, calls.ts, leases.ts,
 * primitives.ts, sessions.ts, watching.ts) share the Env it holds.
 */
export class Client {
  readonly clientId: string;
  #requestTimeoutMs: number;
  #closed = false;
  #closeDone: Promise<void> | undefined;
  #closing = new AbortController(); // aborted by close(): waits give up, reconnects stop
  #calls = new Set<Promise<unknown>>();
  #conns: Connection;
  #leases: Leases;
  #sessions: Sessions;
  #parts: { env: Env; calls: Calls; conns: Connection };

  constructor(endpoints: string | string[], opts: ClientOptions = {}) {
    const list = typeof endpoints === "string" ? endpoints.split(",").map((s) => s.trim()).filter(Boolean) : [...endpoints];
    if (list.length === 0) throw new LockgateError("bad_json", "lockgate: no endpoints");
    // TLS is all or nothing: a bare host:port (and every redirect, which
    // names a bare address) is dialled as wss:// when any endpoint is.
    let secure = !!opts.tls;
    for (const e of list) secure ||= wsUrl(e, false).startsWith("wss:");
    for (const e of list) {
      if (secure && !wsUrl(e, true).startsWith("wss:")) {
        throw new LockgateError("bad_json", `lockgate: endpoint ${JSON.stringify(e)} is plaintext while the client speaks TLS`);
      }
    }
    this.clientId = opts.clientId ?? "js-" + newHandle().slice(0, 12);
    checkOwner(this.clientId);
    this.#requestTimeoutMs = opts.requestTimeoutMs ?? DefaultRequestTimeoutMs;
    const log = opts.logger ?? (() => {});
    const env: Env = {
      requestTimeoutMs: this.#requestTimeoutMs,
      maxHops: opts.maxHops ?? DefaultMaxHops,
      log,
      closing: this.#closing.signal,
      closed: () => this.#closed,
      track: (p) => this.#track(p),
    };
    this.#conns = new Connection(
      env,
      {
        endpoints: list,
        secure,
        dialTimeoutMs: opts.dialTimeoutMs ?? DefaultDialTimeoutMs,
        tls: typeof opts.tls === "object" ? opts.tls : undefined,
        token: opts.token,
        webSocket: opts.webSocket,
      },
      (r) => this.#leases.onWanted(r),
    );
    const calls = new Calls(env, this.#conns);
    this.#parts = { env, calls, conns: this.#conns };
    if (opts.sessionTtlMs !== undefined) checkTtl(opts.sessionTtlMs);
    const sessionRetryMs = opts.sessionRetryMs ?? DefaultSessionRetryMs;
    if (!(sessionRetryMs >= 0)) throw new LockgateError("bad_json", `lockgate: sessionRetryMs ${opts.sessionRetryMs} is not a non-negative number`);
    this.#sessions = new Sessions(env, calls, this.#conns, this.clientId, {
      useSessions: (opts.sessions ?? true) && !opts.cacheLeases,
      sessionTtlMs: opts.sessionTtlMs,
      sessionRetryMs,
      warn: opts.logger ?? ((m) => console.warn(m)),
    });
    let cache: { idleMs: number; max: number } | undefined;
    if (opts.cacheLeases) {
      const idle = opts.cacheIdleMs ?? DefaultCacheIdleMs;
      const max = opts.maxCachedLeases ?? DefaultMaxCachedLeases;
      if (!(idle > 0)) throw new LockgateError("bad_json", `lockgate: cacheIdleMs ${idle} is not positive`);
      if (!Number.isInteger(max) || max < 0) throw new LockgateError("bad_json", `lockgate: maxCachedLeases ${max} is not a non-negative integer`);
      cache = { idleMs: idle, max };
    }
    this.#leases = new Leases(env, calls, this.#conns, this.#sessions, this.clientId, cache);
  }

  /** What became of the client's own session (ClientOptions.sessions): all zero with sessions off or a gateway without them. */
  sessionStats(): SessionStats {
    return this.#sessions.stats();
  }

  /** What the lease cache did (ClientOptions.cacheLeases); all zero when it is off. */
  cacheStats(): CacheStats {
    return this.#leases.cache?.stats() ?? { hits: 0, misses: 0, kept: 0, reclaimed: 0, idle: 0, unused: 0 };
  }

  /** Whether the gateway the client is (or was last) connected to announced "wanted" pushes; false before the first connection. */
  get signalsWanted(): boolean {
    return this.#conns.signalsWanted;
  }

  /** The address of the gateway the client is connected to (after redirects: the leader's), or "" while it is not. */
  get endpoint(): string {
    const c = this.#conns.conn;
    return c && !c.closed ? c.addr : "";
  }

  /**
   * acquire waits, across reconnects and leader changes, until the key is
   * granted. It fails with TimeoutError when waitMs runs out, with
   * CancelledError when opts.signal aborts (the wait is cancelled on the
   * gateway and a grant that raced in is released), and with a
   * LockgateError for invalid input or a closed client.
   */
  acquire(key: string, opts: AcquireOptions = {}): Promise<Lease> {
    return this.#track(this.#leases.acquire(key, opts, true));
  }

  /** tryAcquire makes one attempt: a held key fails with HeldError naming the holder. */
  tryAcquire(key: string, opts: AcquireOptions = {}): Promise<Lease> {
    return this.#track(this.#leases.acquire(key, opts, false));
  }

  /**
   * acquireAll waits until every key is granted at once (all or nothing;
   * needs the gateway's "multikey" feature) and returns one lease per key,
   * in the order of keys. Options, cancellation and waitMs as acquire's.
   * The leases are never kept by the lease cache.
   */
  acquireAll(keys: string[], opts: AcquireOptions = {}): Promise<Lease[]> {
    return this.#track(acquireAll(this.#leases, keys, opts, true));
  }

  /** tryAcquireAll makes one attempt at every key: a held key fails with HeldError and nothing is held. */
  tryAcquireAll(keys: string[], opts: AcquireOptions = {}): Promise<Lease[]> {
    return this.#track(acquireAll(this.#leases, keys, opts, false));
  }

  /**
   * openSession opens a session (needs the gateway's "sessions" feature):
   * leases acquired with `{ session }` live as long as it does, all renewed
   * by one keep-alive every ttl/3 (unless keepAlive is false). It is bounded
   * by requestTimeoutMs.
   */
  openSession(opts: SessionOptions = {}): Promise<Session> {
    return this.#track(this.#sessions.openSession(opts));
  }

  /** renewSession is one keep-alive of s; SessionExpiredError (and s ends, its leases "not_held") when the server no longer has it. */
  renewSession(s: Session): Promise<void> {
    return s.renew();
  }

  /** closeSession ends s on the server: every lease in it is released. A session already gone gives SessionExpiredError (and ends here all the same). */
  closeSession(s: Session): Promise<void> {
    return s.close();
  }

  /** The client's own session (ClientOptions.sessions) while it lives, else undefined. */
  get session(): Session | undefined {
    return this.#sessions.ownSession;
  }

  /**
   * features is what the gateway announced in its upgrade's
   * Lockgate-Features (wanted, shared, semaphore, multikey, watch,
   * lockdelay), connecting first if the client has no connection (bounded
   * by requestTimeoutMs). undefined where the client cannot read the
   * header (a browser's WebSocket): there nothing is refused locally and
   * the gateway answers "unsupported" itself.
   */
  async features(opts: { signal?: AbortSignal } = {}): Promise<string[] | undefined> {
    if (this.#closed) throw closedError();
    const ctl = new AbortController();
    const t = setTimeout(() => {
      const dialErr = this.#conns.dialErr;
      const why = dialErr ? ` (last dial: ${dialErr.message})` : "";
      ctl.abort(new LockgateError("unavailable", `lockgate: features: no connection within ${this.#requestTimeoutMs} ms${why}`));
    }, this.#requestTimeoutMs);
    const stop = AbortSignal.any([ctl.signal, this.#closing.signal, ...(opts.signal ? [opts.signal] : [])]);
    try {
      const conn = await this.#track(abortable(this.#conns.get(), stop));
      return conn.featuresKnown ? [...conn.features] : undefined;
    } finally {
      clearTimeout(t);
    }
  }

  /**
   * watch streams key's holder changes (needs the gateway's "watch"
   * feature): first an event per current holder, then "synced", then
   * every grant, release and expiry as it happens. It resolves once the
   * gateway has accepted the watch. Iterate the Watch with `for await`;
   * the iteration ends quietly when opts.signal aborts or watch.close() is
   * called, and throws when the watch breaks: WatchOverflowError when it
   * fell behind, a LockgateError "unavailable" when its connection was
   * lost (a watch lives on one connection: watch again, the new watch
   * starts with the current holders).
   *
   * With opts.prefix it watches every key starting with key ("" for every
   * key; needs "watchprefix"): "synced" first, no holders, then each
   * change under the prefix with the event's own key.
   */
  watch(key: string, opts: WatchOptions = {}): Promise<Watch> {
    return this.#track(watchKey(this.#parts, key, opts));
  }

  /** inspect reports the holder of key, or null when nobody holds it. */
  inspect(key: string, opts: { signal?: AbortSignal } = {}): Promise<LockInfo | null> {
    return this.#track(this.#leases.inspect(key, opts.signal));
  }

  /**
   * close: waiting acquires cancel their waits on the gateway and fail with
   * code "closed", auto-renewals stop, later calls fail with "closed", and
   * the connection closes. Leases kept unused by the lease cache are
   * released first; leases in use stay held on the server until their TTL
   * unless released first. Idempotent.
   */
  close(): Promise<void> {
    this.#closeDone ??= this.#close();
    return this.#closeDone;
  }

  async #close(): Promise<void> {
    // The unused cached leases are released for real while calls still go out.
    // Each release is bounded by requestTimeoutMs.
    if (this.#leases.cache) await this.#leases.cache.close();
    this.#closed = true;
    for (const l of this.#leases.held.values()) l._stopRenewing();
    // As the Go SDK: the keep-alives stop, and the sessions' leases run out.
    for (const s of this.#sessions.sessions) s.stopKeepAlive();
    this.#closing.abort(closedError());
    // Let the waits cancel themselves on the connection, bounded.
    const calls = Promise.allSettled([...this.#calls]);
    // The bound's timer is cleared: left running it kept Node's event loop alive for requestTimeoutMs after close.
    const bound = new AbortController();
    await Promise.race([calls, sleep(this.#requestTimeoutMs, bound.signal).catch(() => {})]);
    bound.abort();
    this.#conns.conn?.close(new Error("client closed"), 1000);
  }

  #track<T>(p: Promise<T>): Promise<T> {
    this.#calls.add(p);
    const forget = () => this.#calls.delete(p);
    p.then(forget, forget);
    return p;
  }
}

export type { HolderInfo };
