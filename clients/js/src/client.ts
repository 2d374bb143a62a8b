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
import { CancelledError, LockgateError, NotHeldError, TimeoutError, UnsupportedError, errorFromReply, type HolderInfo } from "./errors.js";
import { Conn, type Pending } from "./conn.js";
import { DefaultCacheIdleMs, DefaultMaxCachedLeases, LeaseCache, type CacheKey, type CacheStats } from "./cache.js";
import { Lease, type LeaseOps, type Mode } from "./lease.js";
import { Watch, WatchBuffer, type WatchOptions } from "./watch.js";
import { dial, wsUrl, type Sock, type TlsOptions } from "./socket.js";
import { BackoffBaseMs, BackoffMaxMs, backoffMs, needsEarlyRenew, now } from "./timing.js";
import {
  Cmd,
  DefaultTtlMs,
  checkKey,
  checkKeys,
  checkOwner,
  checkPrimitives,
  checkTtl,
  checkValue,
  newHandle,
  type Reply,
  type Request,
} from "./wire.js";

/** Defaults of ClientOptions. */
export const DefaultDialTimeoutMs = 5_000;
export const DefaultRequestTimeoutMs = 10_000;
export const DefaultMaxHops = 5;
/** A redirect to an address whose dial failed less than this long ago is not followed. */
const DeadForMs = 1_000;

export interface ClientOptions {
  /** Owner recorded with locks acquired without AcquireOptions.clientId. Default "js-" + 12 random hex digits. */
  clientId?: string;
  /** Bearer token: sent as `Authorization: Bearer` (Node) and as the `lockgate.bearer.<base64url>` subprotocol. */
  token?: string;
  /** Bounds tryAcquire, renew, release and inspect, re-sends included (not a waiting acquire). Default 10 s. */
  requestTimeoutMs?: number;
  /** Bounds one connection attempt. Default 5 s. */
  dialTimeoutMs?: number;
  /** not_leader redirects one request follows before it backs off (acquire) or fails. Default 5. */
  maxHops?: number;
  /** TLS for Node (CA, client certificate); also makes bare host:port endpoints wss://. */
  tls?: TlsOptions | boolean;
  /** A WebSocket constructor (standard API) to use instead of `ws` in Node or globalThis.WebSocket. */
  webSocket?: unknown;
  /** Receives connection events (reconnects, redirects). Default: none. */
  logger?: (msg: string) => void;
  /**
   * The lease cache (docs/lease-cache.md), off by default: release keeps a
   * lease, unused and still renewed, and the next acquire/tryAcquire of its
   * key with the same options returns the same Lease without a round trip.
   * A kept lease is released for real when another caller waits for it (the
   * gateway's "wanted" push), after cacheIdleMs unused, and at close().
   * Leases are kept only behind a gateway that announces "wanted" pushes
   * (Lockgate-Features on the upgrade response), which a browser cannot
   * read: there the option changes nothing.
   */
  cacheLeases?: boolean;
  /** How long an unused lease stays cached before it is released for real. Default 10 s. */
  cacheIdleMs?: number;
  /** The most unused leases the cache keeps; past it release releases. Default 1024. */
  maxCachedLeases?: number;
}

export interface AcquireOptions {
  /** Lease TTL in ms (10 ms … 24 h). Absent: 20 s, auto-renewed. */
  ttlMs?: number;
  /** Stored with the lock (≤ 4096 bytes), returned by inspect. */
  value?: string;
  /** Renew at ttl/3 until released or lost. Default: true when ttlMs is absent, else false. */
  autoRenew?: boolean;
  /** Aborting it gives up the acquire: a queued wait is cancelled on the gateway (command 6) and a grant that raced in released. */
  signal?: AbortSignal;
  /** acquire only: the server ends the wait after this many ms with code "timeout" (TimeoutError). */
  waitMs?: number;
  /** Owner recorded with this lock instead of the client's id. */
  clientId?: string;
  /** Release this lease if the connection drops (default: it lives until its TTL, so a reconnect resumes it). */
  releaseOnDisconnect?: boolean;
  /** "shared": a read lock, held beside other shared holders and never beside an exclusive one. Default "exclusive". Needs the gateway's "shared" feature. */
  mode?: Mode;
  /** A semaphore of this many permits (1 … 65536): at most that many holders at once (a shared hold). Needs "semaphore". */
  permits?: number;
  /** After this lease expires (not when released), nobody is granted the key for this many ms (≤ 60000). Needs "lockdelay". */
  lockDelayMs?: number;
}

/** An acquire's options, checked and normalized. */
interface Prepared {
  owner: string;
  ttlMs: number;
  autoRenew: boolean;
  mode: Mode;
  permits: number;
  lockDelayMs: number;
  /** The gateway features the acquire needs. */
  needs: string[];
}

/** One holder of a shared key, as inspect reports it. */
export interface HolderDetail {
  owner: string;
  fencingToken: bigint | undefined;
  value: string | undefined;
  expiresInMs: number | undefined;
}

/** The #held map's key: raftlock gives every lease of an acquireAll the same lock token. */
function heldKey(key: string, lockToken: string): string {
  return lockToken + "\u0000" + key;
}

/** What inspect reports of a held key. */
export interface LockInfo {
  key: string;
  owner: string;
  fencingToken: bigint | undefined;
  value: string | undefined;
  /** Ms the lease had left when the server answered. */
  expiresInMs: number | undefined;
  /** Callers queued for the key (-1 when the server does not say). */
  waiters: number;
  /** How the key is held: "shared" for read locks and semaphores. */
  mode: Mode;
  /** A semaphore's permits (0 otherwise). */
  permits: number;
  /** A shared key's holders, oldest grant first (empty for an exclusive one). */
  holders: HolderDetail[];
}

/** One logical request, sent once per connection attempt (each copy with a fresh id) until answered. */
interface Call {
  op: string;
  req: Request;
  /** A waiting acquire: cancelled on the gateway when given up. */
  wait?: boolean;
  /** The answer may be a grant, which must be released if nobody takes it. */
  grantable?: boolean;
  onSend?: (t: number) => void;
  /** Gateway features the request needs: refused locally (UnsupportedError) on a gateway that did not announce one. */
  needs?: string[];
  /** Caps the retry backoff below BackoffMaxMs (renewals: ttl/10, so that a lease notices a new leader in time). */
  maxBackoffMs?: number;
  sends: number;
  first: number;
  last: number;
  /** An earlier copy than the answered one may have taken effect (dropped, or answered unavailable). */
  prior: boolean;
}

function newCall(op: string, req: Request, extra: Partial<Call> = {}): Call {
  return { op, req, sends: 0, first: 0, last: 0, prior: false, ...extra };
}

/** sleep waits ms; it rejects with the signal's reason when aborted first. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** abortable settles as p, or rejects with signal's reason when it aborts first. */
function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}

export class Client {
  readonly clientId: string;
  #endpoints: string[];
  #secure: boolean;
  #requestTimeoutMs: number;
  #dialTimeoutMs: number;
  #maxHops: number;
  #tls: TlsOptions | undefined;
  #token: string | undefined;
  #webSocket: unknown;
  #log: (msg: string) => void;

  #closed = false;
  #closeDone: Promise<void> | undefined;
  #closing = new AbortController(); // aborted by close(): waits give up, reconnects stop
  #nextId = 0;
  #conn: Conn | undefined;
  #connecting: Promise<Conn> | undefined;
  #next = ""; // a redirect target, dialled next without backoff
  #avoid = ""; // the gateway that just failed us
  #attempt = 0; // consecutive failed connects
  #dead = new Map<string, number>(); // addresses whose last dial failed, and when
  #dialErr: Error | undefined;
  #calls = new Set<Promise<unknown>>();
  // Live leases by lock token, for "wanted" pushes; lock tokens of acquires
  // in flight (true once a push came for one).
  #held = new Map<string, Lease>();
  #early = new Map<string, boolean>();
  #ops: LeaseOps;
  // What the last gateway announced (Lockgate-Features: wanted); the lease
  // cache keeps leases only when it did.
  #signalsWanted = false;
  #cache: LeaseCache | undefined;

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
    this.#endpoints = list;
    this.#secure = secure;
    this.#requestTimeoutMs = opts.requestTimeoutMs ?? DefaultRequestTimeoutMs;
    this.#dialTimeoutMs = opts.dialTimeoutMs ?? DefaultDialTimeoutMs;
    this.#maxHops = opts.maxHops ?? DefaultMaxHops;
    this.#tls = typeof opts.tls === "object" ? opts.tls : undefined;
    this.#token = opts.token;
    this.#webSocket = opts.webSocket;
    this.#log = opts.logger ?? (() => {});
    this.#ops = {
      renew: (lease, ttlMs, signal) => this.#track(this.#renew(lease.key, lease.lockToken, lease.fencingToken, ttlMs, signal)),
      release: (lease) => this.#track(this.#releaseOrKeep(lease)),
      untrack: (lease) => {
        const hk = heldKey(lease.key, lease.lockToken);
        if (this.#held.get(hk) === lease) this.#held.delete(hk);
      },
    };
    if (opts.cacheLeases) {
      const idle = opts.cacheIdleMs ?? DefaultCacheIdleMs;
      const max = opts.maxCachedLeases ?? DefaultMaxCachedLeases;
      if (!(idle > 0)) throw new LockgateError("bad_json", `lockgate: cacheIdleMs ${idle} is not positive`);
      if (!Number.isInteger(max) || max < 0) throw new LockgateError("bad_json", `lockgate: maxCachedLeases ${max} is not a non-negative integer`);
      this.#cache = new LeaseCache(
        {
          releaseQuietly: (lease) => this.#releaseQuietly(lease),
          log: (m) => this.#log(m),
        },
        idle,
        max,
      );
    }
  }

  /** What the lease cache did (ClientOptions.cacheLeases); all zero when it is off. */
  cacheStats(): CacheStats {
    return this.#cache?.stats() ?? { hits: 0, misses: 0, kept: 0, reclaimed: 0, idle: 0, unused: 0 };
  }

  /** Whether the gateway the client is (or was last) connected to announced "wanted" pushes; false before the first connection. */
  get signalsWanted(): boolean {
    return this.#signalsWanted;
  }

  /** The address of the gateway the client is connected to (after redirects: the leader's), or "" while it is not. */
  get endpoint(): string {
    return this.#conn && !this.#conn.closed ? this.#conn.addr : "";
  }

  /**
   * acquire waits, across reconnects and leader changes, until the key is
   * granted. It fails with TimeoutError when waitMs runs out, with
   * CancelledError when opts.signal aborts (the wait is cancelled on the
   * gateway and a grant that raced in is released), and with a
   * LockgateError for invalid input or a closed client.
   */
  acquire(key: string, opts: AcquireOptions = {}): Promise<Lease> {
    return this.#track(this.#acquire(key, opts, true));
  }

  /** tryAcquire makes one attempt: a held key fails with HeldError naming the holder. */
  tryAcquire(key: string, opts: AcquireOptions = {}): Promise<Lease> {
    return this.#track(this.#acquire(key, opts, false));
  }

  /**
   * acquireAll waits until every key is granted at once (all or nothing;
   * needs the gateway's "multikey" feature) and returns one lease per key,
   * in the order of keys. Options, cancellation and waitMs as acquire's.
   * The leases are never kept by the lease cache.
   */
  acquireAll(keys: string[], opts: AcquireOptions = {}): Promise<Lease[]> {
    return this.#track(this.#acquireAll(keys, opts, true));
  }

  /** tryAcquireAll makes one attempt at every key: a held key fails with HeldError and nothing is held. */
  tryAcquireAll(keys: string[], opts: AcquireOptions = {}): Promise<Lease[]> {
    return this.#track(this.#acquireAll(keys, opts, false));
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
    if (this.#closed) throw this.#closedError();
    const ctl = new AbortController();
    const t = setTimeout(() => {
      const why = this.#dialErr ? ` (last dial: ${this.#dialErr.message})` : "";
      ctl.abort(new LockgateError("unavailable", `lockgate: features: no connection within ${this.#requestTimeoutMs} ms${why}`));
    }, this.#requestTimeoutMs);
    const stop = AbortSignal.any([ctl.signal, this.#closing.signal, ...(opts.signal ? [opts.signal] : [])]);
    try {
      const conn = await this.#track(abortable(this.#getConn(), stop));
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
   */
  watch(key: string, opts: WatchOptions = {}): Promise<Watch> {
    return this.#track(this.#watch(key, opts));
  }

  /** inspect reports the holder of key, or null when nobody holds it. */
  inspect(key: string, opts: { signal?: AbortSignal } = {}): Promise<LockInfo | null> {
    return this.#track(this.#inspect(key, opts.signal));
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
    if (this.#cache) await this.#cache.close();
    this.#closed = true;
    for (const l of this.#held.values()) l._stopRenewing();
    this.#closing.abort(new LockgateError("closed", "lockgate: the client is closed"));
    // Let the waits cancel themselves on the connection, bounded.
    const calls = Promise.allSettled([...this.#calls]);
    // The bound's timer is cleared: left running it kept Node's event loop alive for requestTimeoutMs after close.
    const bound = new AbortController();
    await Promise.race([calls, sleep(this.#requestTimeoutMs, bound.signal).catch(() => {})]);
    bound.abort();
    this.#conn?.close(new Error("client closed"), 1000);
  }

  #track<T>(p: Promise<T>): Promise<T> {
    this.#calls.add(p);
    const forget = () => this.#calls.delete(p);
    p.then(forget, forget);
    return p;
  }

  #newId(): string {
    return (++this.#nextId).toString(36);
  }

  #closedError(): LockgateError {
    return new LockgateError("closed", "lockgate: the client is closed");
  }

  // ---- acquire, renew, release, inspect ----

  async #watch(key: string, opts: WatchOptions): Promise<Watch> {
    if (this.#closed) throw this.#closedError();
    checkKey(key);
    opts.signal?.throwIfAborted();
    const what = `watch ${JSON.stringify(key)}`;
    const ctl = new AbortController();
    const t = setTimeout(() => ctl.abort(new LockgateError("unavailable", `lockgate: ${what}: not established within ${this.#requestTimeoutMs} ms`)), this.#requestTimeoutMs);
    const stop = [this.#closing.signal, ...(opts.signal ? [opts.signal] : [])];
    const onStop = () => ctl.abort(opts.signal?.aborted ? new CancelledError(`lockgate: ${what}: cancelled by the caller`, opts.signal.reason) : this.#closedError());
    for (const s of stop) s.addEventListener("abort", onStop, { once: true });
    let hops = 0;
    let retry = 0;
    try {
      for (;;) {
        ctl.signal.throwIfAborted();
        const conn = await abortable(this.#getConn(), ctl.signal);
        if (conn.featuresKnown && !conn.features.includes("watch")) {
          throw new UnsupportedError(`lockgate: ${what}: unsupported: the gateway ${conn.addr} does not offer "watch" (Lockgate-Features: ${conn.features.join(",") || "none"})`, "watch");
        }
        const id = this.#newId();
        const p = conn.register(id);
        if (!p) continue;
        p.limit = WatchBuffer;
        const ops = {
          unwatch: () => conn.send({ id: this.#newId(), commandType: Cmd.unwatch, target: id }),
          forget: () => conn.unregister(id),
        };
        p.onOverflow = () => {
          try {
            ops.unwatch();
          } catch {
            // the connection is gone
          }
        };
        try {
          conn.send({ id, commandType: Cmd.watch, key });
        } catch {
          conn.unregister(id);
          continue;
        }
        let first: Reply | null;
        try {
          first = await abortable(p.next(), ctl.signal);
        } catch (e) {
          conn.unregister(id);
          try {
            ops.unwatch();
          } catch {
            // the connection is gone
          }
          throw e;
        }
        if (first === null) continue; // the connection dropped: watch again on the next
        if (first.type === "error") {
          conn.unregister(id);
          switch (first.error?.code) {
            case "not_leader": {
              let addr = first.error.leader?.addr ?? "";
              if (addr && this.#isDead(addr)) addr = "";
              if (addr && addr !== conn.addr && hops < this.#maxHops) {
                hops++;
                conn.closeFor(addr, false, new Error("not_leader"));
                continue;
              }
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
        return new Watch(key, first, p, ops, stop);
      }
    } finally {
      clearTimeout(t);
      for (const s of stop) s.removeEventListener("abort", onStop);
    }
  }

  /** #prepare checks an acquire's options as the server would and normalizes them. */
  #prepare(opts: AcquireOptions): Prepared {
    if (opts.ttlMs !== undefined) checkTtl(opts.ttlMs);
    if (opts.value !== undefined) checkValue(opts.value);
    const owner = opts.clientId ?? this.clientId;
    checkOwner(owner);
    if (opts.waitMs !== undefined && (!Number.isInteger(opts.waitMs) || opts.waitMs < 0)) {
      throw new LockgateError("invalid_wait", `lockgate: waitMs ${opts.waitMs} is not a non-negative integer`);
    }
    checkPrimitives(opts.mode, opts.permits, opts.lockDelayMs);
    const permits = opts.permits ?? 0;
    const mode: Mode = permits > 0 ? "shared" : (opts.mode ?? "exclusive"); // a permit is a shared hold
    const lockDelayMs = opts.lockDelayMs ?? 0;
    const needs: string[] = [];
    if (permits > 0) needs.push("semaphore");
    else if (mode === "shared") needs.push("shared");
    if (lockDelayMs > 0) needs.push("lockdelay");
    return { owner, ttlMs: opts.ttlMs ?? DefaultTtlMs, autoRenew: opts.autoRenew ?? opts.ttlMs === undefined, mode, permits, lockDelayMs, needs };
  }

  /** #primitiveFields sets the request's mode, permits and lockDelayMs (absent when default, as the Go SDK sends them). */
  #primitiveFields(req: Request, p: Prepared): void {
    if (p.mode === "shared") req.mode = "shared";
    if (p.permits > 0) req.permits = p.permits;
    if (p.lockDelayMs > 0) req.lockDelayMs = p.lockDelayMs;
  }

  async #acquire(key: string, opts: AcquireOptions, wait: boolean): Promise<Lease> {
    if (this.#closed) throw this.#closedError();
    checkKey(key);
    const p = this.#prepare(opts);
    const { owner, ttlMs, autoRenew } = p;
    opts.signal?.throwIfAborted();
    // Only plain exclusive leases without lock-delay are cached (as the Go
    // SDK): an acquire of another kind gives up a kept lease of its key.
    const cache = this.#cache;
    const plain = p.needs.length === 0;
    const ck: CacheKey = { owner, ttlMs, value: opts.value, autoRenew, releaseOnDisconnect: !!opts.releaseOnDisconnect };
    if (cache && plain) {
      const { hit, stale } = cache.take(key, ck);
      if (hit) return hit;
      if (stale) await this.#releaseQuietly(stale); // or this acquire would wait behind it
    } else if (cache) {
      for (const stale of cache.evict([key])) await this.#releaseQuietly(stale);
    }
    for (;;) {
      const handle = newHandle();
      this.#early.set(handle, false);
      try {
        const req: Request = { commandType: wait ? Cmd.acquire : Cmd.tryAcquire, key, clientId: owner, ttl: ttlMs, lockToken: handle };
        if (opts.value !== undefined) req.value = opts.value;
        if (opts.releaseOnDisconnect) req.releaseOnDisconnect = true;
        if (wait && opts.waitMs !== undefined) req.waitMs = opts.waitMs;
        this.#primitiveFields(req, p);
        const k = newCall(wait ? "acquire" : "try-acquire", req, { wait, grantable: true, needs: p.needs });
        const r = await this.#runAcquire(k, opts, wait, JSON.stringify(key));
        if (r.type !== "grant") throw this.#unexpected(r, k, "grant");
        const lease = await this.#lease(r, key, p, k.first, opts.value);
        if (lease) {
          if (plain) cache?.hold(lease, ck);
          return lease;
        }
        if (!wait) throw new NotHeldError(`lockgate: try-acquire ${JSON.stringify(key)}: the grant expired before it could be renewed`);
        this.#log(`grant of ${key} expired on arrival; queueing again`);
      } finally {
        this.#early.delete(handle);
      }
    }
  }

  /**
   * #runAcquire runs an acquire's call: bounded by requestTimeoutMs for a
   * try, by waitMs (plus grace) for a timed wait, and given up when the
   * caller's signal aborts (CancelledError) or the client closes.
   */
  async #runAcquire(k: Call, opts: AcquireOptions, wait: boolean, what: string): Promise<Reply> {
    const req = k.req;
    if (req.waitMs !== undefined) {
      // A copy re-sent after a reconnect waits only for what is left.
      const waitMs = req.waitMs;
      k.onSend = (t) => (req.waitMs = Math.max(1, Math.round(waitMs - (t - k.first))));
    }
    const ctl = new AbortController();
    const stops: Array<() => void> = [];
    const stopOn = (s: AbortSignal | undefined, reason: () => unknown) => {
      if (!s) return;
      const f = () => ctl.abort(reason());
      if (s.aborted) f();
      s.addEventListener("abort", f, { once: true });
      stops.push(() => s.removeEventListener("abort", f));
    };
    stopOn(opts.signal, () => new CancelledError(`lockgate: ${k.op} ${what}: cancelled by the caller`, opts.signal!.reason));
    stopOn(this.#closing.signal, () => this.#closedError());
    let timer: ReturnType<typeof setTimeout> | undefined;
    if (!wait) {
      timer = setTimeout(() => ctl.abort(this.#noAnswer(k)), this.#requestTimeoutMs);
    } else if (opts.waitMs !== undefined) {
      // The server ends the wait at waitMs ("timeout"); this bound
      // covers a server that ignores waitMs, and time lost to reconnects.
      const grace = Math.min(2_000, 200 + opts.waitMs / 10);
      timer = setTimeout(
        () => ctl.abort(new TimeoutError(`lockgate: ${k.op} ${what}: not granted within waitMs ${opts.waitMs}`)),
        opts.waitMs + grace,
      );
    }
    try {
      return await this.#do(k, ctl.signal);
    } finally {
      if (timer) clearTimeout(timer);
      for (const s of stops) s();
    }
  }

  /**
   * #acquireAll is acquireAll (wait) and tryAcquireAll: one "grants" reply
   * with a lease per key, in order, or nothing held. A grant one of whose
   * leases cannot be used (it expired on arrival) is given back whole.
   */
  async #acquireAll(keys: string[], opts: AcquireOptions, wait: boolean): Promise<Lease[]> {
    if (this.#closed) throw this.#closedError();
    checkKeys(keys);
    const p = this.#prepare(opts);
    opts.signal?.throwIfAborted();
    keys = [...keys];
    const what = JSON.stringify(keys);
    // Never cached; an unused cached lease of one of the keys would hold it against us.
    if (this.#cache) for (const stale of this.#cache.evict(keys)) await this.#releaseQuietly(stale);
    for (;;) {
      const handle = newHandle();
      this.#early.set(handle, false);
      try {
        const req: Request = { commandType: wait ? Cmd.acquireAll : Cmd.tryAcquireAll, keys, clientId: p.owner, ttl: p.ttlMs, lockToken: handle };
        if (opts.value !== undefined) req.value = opts.value;
        if (wait && opts.waitMs !== undefined) req.waitMs = opts.waitMs;
        this.#primitiveFields(req, p);
        const k = newCall(wait ? "acquire-all" : "try-acquire-all", req, { wait, grantable: true, needs: ["multikey", ...p.needs] });
        const r = await this.#runAcquire(k, opts, wait, what);
        if (r.type !== "grants") throw this.#unexpected(r, k, "grants");
        const got = r.leases ?? [];
        const leases: Lease[] = [];
        let lost: LockgateError | undefined;
        let expired = false;
        if (got.length !== keys.length) {
          lost = new LockgateError("unavailable", `lockgate: ${k.op} ${what}: ${got.length} leases for ${keys.length} keys`);
        }
        for (let i = 0; !lost && i < got.length; i++) {
          const g = got[i]!;
          if (g.key !== keys[i]) {
            lost = new LockgateError("unavailable", `lockgate: ${k.op} ${what}: lease ${i} is for ${JSON.stringify(g.key)}, not ${JSON.stringify(keys[i])}`);
            break;
          }
          const lease = await this.#lease({ ...g, type: "grant" }, keys[i]!, p, k.first, opts.value);
          if (!lease) {
            expired = true;
            lost = new NotHeldError(`lockgate: ${k.op} ${what}: the grant of ${JSON.stringify(keys[i])} expired before it could be renewed`);
            break;
          }
          leases.push(lease);
        }
        if (!lost) return leases;
        // All or nothing: give back what this grant gave.
        for (const l of leases) await this.#release(l).catch(() => {});
        const conn = this.#conn;
        for (const g of got.slice(leases.length + (expired ? 1 : 0))) {
          if (g.key && g.lockToken) await this.#releaseRaced(conn, { type: "grant", key: g.key, lockToken: g.lockToken, fencingToken: g.fencingToken ?? 0n });
        }
        if (!(expired && wait)) throw lost;
        this.#log(`a grant of ${what} expired on arrival; queueing again`);
      } finally {
        this.#early.delete(handle);
      }
    }
  }

  /**
   * #lease turns a grant into a Lease. sent is the send time of the first
   * copy of the acquire: the TTL started on the server after it. If less
   * than half the TTL is left of sent + ttl (a long wait), the lease is
   * renewed at once and the renewal's send time used. undefined when that
   * renewal found the lease gone.
   */
  async #lease(r: Reply, key: string, p: Prepared, sent: number, value?: string): Promise<Lease | undefined> {
    if (!r.lockToken || r.fencingToken === undefined) {
      throw new LockgateError("unavailable", `lockgate: acquire ${JSON.stringify(key)}: grant without lockToken or fencingToken`);
    }
    const ttl = r.ttl && r.ttl > 0 && r.ttl < p.ttlMs ? r.ttl : p.ttlMs;
    if (needsEarlyRenew(sent, ttl, now())) {
      try {
        sent = await this.#renew(key, r.lockToken, r.fencingToken, ttl);
      } catch (e) {
        if (e instanceof NotHeldError) return undefined;
        this.#log(`renewing a late grant of ${key} failed; its deadline stays short: ${(e as Error).message}`);
      }
    }
    const lease = new Lease(this.#ops, {
      key,
      owner: r.owner || p.owner,
      lockToken: r.lockToken,
      fencingToken: r.fencingToken,
      ttlMs: ttl,
      sent,
      ...(value !== undefined ? { value } : {}),
      autoRenew: p.autoRenew && !this.#closed,
      wanted: !!r.wanted || this.#early.get(r.lockToken) === true,
      mode: r.mode === "shared" ? "shared" : "exclusive",
      permits: typeof r.permits === "number" ? r.permits : 0,
    });
    if (lease.reason === undefined) this.#held.set(heldKey(key, lease.lockToken), lease);
    return lease;
  }

  /** #releaseOrKeep is Lease.release: with the cache on, a lease nobody else wants is kept instead of released. */
  async #releaseOrKeep(lease: Lease): Promise<void> {
    if (this.#cache && !this.#closed && this.#cache.put(lease, this.#signalsWanted)) return;
    return this.#release(lease);
  }

  /** #releaseQuietly releases for real a lease the cache gave up; a failure is logged (the lease then ends at its TTL). */
  async #releaseQuietly(lease: Lease): Promise<void> {
    try {
      await this.#track(this.#release(lease));
    } catch (e) {
      this.#log(`releasing a cached lease of ${lease.key} failed; it ends at its TTL: ${(e as Error).message}`);
    }
  }

  /** #renew extends (key, lockToken) to ttlMs; resolves with the answered copy's send time; NotHeldError when not held. */
  async #renew(key: string, lockToken: string, token: bigint, ttlMs: number, signal?: AbortSignal): Promise<number> {
    if (this.#closed) throw this.#closedError();
    checkTtl(ttlMs);
    // During an election the retries must not sleep past the lease's
    // deadline: ttl/10 between them, as between the attempts of auto-renew.
    const k = newCall("renew", { commandType: Cmd.renew, key, lockToken, fencingToken: { key, value: token }, ttl: ttlMs }, {
      maxBackoffMs: Math.max(BackoffBaseMs, ttlMs / 10),
    });
    const r = await this.#oneShot(k, signal);
    if (r.type === "renewed") return k.last;
    throw this.#unexpected(r, k, "renewed");
  }

  /**
   * #release frees the lease on the gateway. A re-sent release answered
   * not_held, whose earlier copy may have arrived (its connection dropped
   * before the answer), counts as released when the lease was alive by our
   * clock as the answered copy went out: nothing else can have freed it.
   */
  async #release(lease: Lease): Promise<void> {
    if (this.#closed) throw this.#closedError();
    let alive = false;
    const k = newCall(
      "release",
      { commandType: Cmd.release, key: lease.key, lockToken: lease.lockToken, fencingToken: { key: lease.key, value: lease.fencingToken }, ack: true },
      { onSend: (t) => (alive = lease.reason === undefined && t < lease.deadline) },
    );
    const r = await this.#oneShot(k);
    if (r.type === "released") {
      lease._end("released");
      return;
    }
    if (r.error?.code === "not_held") {
      if (k.prior && alive) {
        lease._end("released");
        return;
      }
      if (k.prior) {
        lease._end("not_held");
        throw new LockgateError(
          "unavailable",
          `lockgate: release ${JSON.stringify(lease.key)}: outcome unknown: the re-sent copy was answered not_held after the lease's deadline`,
        );
      }
      lease._end("not_held");
    }
    throw this.#unexpected(r, k, "released");
  }

  async #inspect(key: string, signal?: AbortSignal): Promise<LockInfo | null> {
    if (this.#closed) throw this.#closedError();
    checkKey(key);
    const k = newCall("inspect", { commandType: Cmd.inspect, key });
    const r = await this.#oneShot(k, signal);
    if (r.error?.code === "not_found") return null;
    if (r.type !== "info") throw this.#unexpected(r, k, "info");
    return {
      key,
      owner: r.owner ?? "",
      fencingToken: r.fencingToken,
      value: r.value,
      expiresInMs: r.expiresIn,
      waiters: typeof r.waiters === "number" ? r.waiters : -1,
      mode: r.mode === "shared" ? "shared" : "exclusive",
      permits: typeof r.permits === "number" ? r.permits : 0,
      holders: (r.holders ?? []).map((h) => ({ owner: h.owner ?? "", fencingToken: h.fencingToken, value: h.value, expiresInMs: h.expiresIn })),
    };
  }

  /** #oneShot runs a call bounded by requestTimeoutMs (and signal, and close). */
  async #oneShot(k: Call, signal?: AbortSignal): Promise<Reply> {
    const ctl = new AbortController();
    const t = setTimeout(() => ctl.abort(this.#noAnswer(k)), this.#requestTimeoutMs);
    const onAbort = () => ctl.abort(signal!.reason);
    const onClose = () => ctl.abort(this.#closedError());
    if (signal?.aborted) onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    this.#closing.signal.addEventListener("abort", onClose, { once: true });
    try {
      return await this.#do(k, ctl.signal);
    } finally {
      clearTimeout(t);
      signal?.removeEventListener("abort", onAbort);
      this.#closing.signal.removeEventListener("abort", onClose);
    }
  }

  #what(k: Call): string {
    return JSON.stringify(k.req.key ?? k.req.keys ?? "");
  }

  #noAnswer(k: Call): LockgateError {
    const why = this.#dialErr ? ` (last dial: ${this.#dialErr.message})` : "";
    return new LockgateError("unavailable", `lockgate: ${k.op} ${this.#what(k)}: no answer within ${this.#requestTimeoutMs} ms${why}`);
  }

  #unexpected(r: Reply, k: Call, want: string): LockgateError {
    const what = `${k.op} ${this.#what(k)}`;
    if (r.type === "error") return errorFromReply(r.error, what);
    return new LockgateError("internal", `lockgate: ${what}: answered ${JSON.stringify(r.type)} where ${JSON.stringify(want)} was expected`);
  }

  // ---- the request loop ----

  /**
   * #do sends k and returns the first answer that is not a transient
   * failure. Dropped connections, not_leader redirects, closed gateways and
   * unavailable answers are retried (redirects at once, the rest with
   * backoff) until signal aborts; then it throws the signal's reason, after
   * cancelling a waiting acquire on the gateway.
   */
  async #do(k: Call, signal: AbortSignal): Promise<Reply> {
    let hops = 0;
    let retry = 0;
    for (;;) {
      signal.throwIfAborted();
      const conn = await abortable(this.#getConn(), signal);
      if (k.needs && conn.featuresKnown) {
        const missing = k.needs.find((f) => !conn.features.includes(f));
        if (missing !== undefined) {
          throw new UnsupportedError(
            `lockgate: ${k.op} ${this.#what(k)}: unsupported: the gateway ${conn.addr} does not offer ${JSON.stringify(missing)} (Lockgate-Features: ${conn.features.join(",") || "none"})`,
            missing,
          );
        }
      }
      const id = this.#newId();
      const p = conn.register(id);
      if (!p) continue;
      const t = now();
      if (k.sends === 0) k.first = t;
      k.sends++;
      k.last = t;
      k.req.id = id;
      k.onSend?.(t);
      try {
        conn.send(k.req);
      } catch {
        conn.unregister(id);
        k.prior = true; // part of the frame may have gone out
        continue;
      }
      let r: Reply | null;
      try {
        r = await abortable(this.#answer(p), signal);
      } catch (e) {
        await this.#abandon(conn, id, p, k);
        throw e;
      }
      conn.unregister(id);
      if (r === null) {
        k.prior = true;
        this.#log(`re-sending ${k.op} ${k.req.key} after a dropped connection to ${conn.addr}`);
        continue;
      }
      switch (r.error?.code) {
        case "not_leader": {
          let addr = r.error.leader?.addr ?? "";
          if (addr && this.#isDead(addr)) addr = ""; // just failed to answer a dial: as if unknown
          if (addr) {
            if (hops < this.#maxHops) {
              hops++;
              if (addr !== conn.addr) {
                // Every request on this connection would be redirected too: move it.
                this.#log(`redirected from ${conn.addr} to the leader at ${addr}`);
                conn.closeFor(addr, false, new Error("not_leader"));
                continue;
              }
              // The named leader is this node, not ready yet: back off.
            } else if (!k.wait) {
              throw errorFromReply(r.error, `${k.op} ${this.#what(k)}`);
            } else {
              hops = 0; // a waiting acquire keeps looking, after a pause
            }
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
          if (!k.wait) return r;
          // Nobody asked for it (we cancel only when giving up): the
          // gateway dropped the wait. Queue again.
          await sleep(backoffMs(++retry, BackoffBaseMs, k.maxBackoffMs ?? BackoffMaxMs), signal);
          continue;
      }
      conn.good();
      return r;
    }
  }

  /** #answer is the next reply that is not an interim "queued" (null: the connection dropped). */
  async #answer(p: Pending): Promise<Reply | null> {
    for (;;) {
      const r = await p.next();
      if (r === null || r.type !== "queued") return r;
    }
  }

  /**
   * #abandon gives up the copy of k sent on conn as id. A waiting acquire is
   * cancelled on the gateway (command 6) and its final answer awaited: a
   * grant that raced with the cancel is released, so the caller is never
   * left holding a lock it did not get. A try-acquire's answer is awaited
   * in the background for the same reason.
   */
  async #abandon(conn: Conn, id: string, p: Pending, k: Call): Promise<void> {
    if (!k.grantable) {
      conn.unregister(id);
      return;
    }
    const settle = async () => {
      try {
        const r = await Promise.race([this.#answer(p), sleep(this.#requestTimeoutMs).then(() => "timeout" as const)]);
        if (r === "timeout") {
          this.#log(`no answer to a cancelled ${k.op} of ${k.req.key}; closing the connection so that the gateway drops the wait`);
          conn.close(new Error("cancelled acquire never answered"));
        } else if (r?.type === "grant") {
          await this.#releaseRaced(conn, r);
        } else if (r?.type === "grants") {
          for (const g of r.leases ?? []) {
            if (g.key && g.lockToken) await this.#releaseRaced(conn, { type: "grant", key: g.key, lockToken: g.lockToken, fencingToken: g.fencingToken ?? 0n });
          }
        } else if (r === null) {
          this.#log(`connection lost while giving up ${k.op} of ${k.req.key}; a grant that raced in stays held until its TTL`);
        }
      } finally {
        conn.unregister(id);
      }
    };
    if (!k.wait) {
      void settle();
      return;
    }
    try {
      conn.send({ id: this.#newId(), commandType: Cmd.cancel, target: id });
    } catch (e) {
      this.#log(`could not send the cancel of ${k.op} ${k.req.key}: ${(e as Error).message}`);
    }
    await settle();
  }

  /** #releaseRaced releases a grant that arrived for a request its caller gave up. */
  async #releaseRaced(conn: Conn | undefined, r: Reply): Promise<void> {
    const req: Request = {
      commandType: Cmd.release, key: r.key!, lockToken: r.lockToken!, fencingToken: { key: r.key!, value: r.fencingToken ?? 0n }, ack: true,
    };
    const id = this.#newId();
    const p = conn?.register(id);
    if (conn && p) {
      try {
        conn.send({ ...req, id });
        const a = await Promise.race([this.#answer(p), sleep(this.#requestTimeoutMs).then(() => null)]);
        if (a && (a.type === "released" || a.error?.code === "not_held")) return;
      } catch {
        // fall through to a fresh call
      } finally {
        conn.unregister(id);
      }
    }
    if (this.#closed) {
      this.#log(`could not release a grant of ${r.key} that raced with giving up; it stays held until its TTL`);
      return;
    }
    try {
      const a = await this.#oneShot(newCall("release", req));
      if (a.type === "released" || a.error?.code === "not_held") return;
    } catch {
      // logged below
    }
    this.#log(`could not release a grant of ${r.key} that raced with giving up; it stays held until its TTL`);
  }

  // ---- connections ----

  #isDead(addr: string): boolean {
    const at = this.#dead.get(addr);
    return at !== undefined && now() - at < DeadForMs;
  }

  /** #getConn is the live connection, connecting (with backoff) when there is none. */
  #getConn(): Promise<Conn> {
    if (this.#closed) return Promise.reject(this.#closedError());
    if (this.#conn && !this.#conn.closed) return Promise.resolve(this.#conn);
    this.#connecting ??= this.#connect().finally(() => (this.#connecting = undefined));
    return this.#connecting;
  }

  async #connect(): Promise<Conn> {
    const old = this.#conn;
    if (old) {
      this.#conn = undefined;
      // Learn from how the last connection ended.
      this.#avoid = old.avoid ? old.addr : "";
      if (old.redirect) this.#next = old.redirect;
      else if (old.useful || now() - old.born > 10_000) this.#attempt = 0; // it worked: reconnect at once
      else this.#attempt++;
      if (!old.redirect) this.#log(`connection to ${old.addr} lost: ${old.cause?.message ?? "closed"}`);
    }
    for (;;) {
      if (this.#closed) throw this.#closedError();
      let addr = this.#next;
      this.#next = "";
      if (!addr) {
        if (this.#attempt > 0) await sleep(backoffMs(this.#attempt), this.#closing.signal);
        addr = this.#pick(this.#avoid);
      }
      try {
        const conn = await this.#dial(addr);
        this.#dialErr = undefined;
        this.#dead.delete(addr);
        this.#conn = conn;
        this.#signalsWanted = conn.wantedFeature;
        this.#log(`connected to ${conn.addr}`);
        if (this.#closed) conn.close(new Error("client closed"), 1000);
        return conn;
      } catch (e) {
        if (e instanceof LockgateError && e.code === "unauthorized") throw e;
        this.#dialErr = e as Error;
        this.#dead.set(addr, now());
        this.#avoid = addr;
        this.#attempt++;
        this.#log(`connect to ${addr} failed (attempt ${this.#attempt}): ${(e as Error).message}`);
      }
    }
  }

  /** #dial connects to addr, following handshake redirects (421 body, 307 Location) for at most maxHops hops. */
  async #dial(addr: string): Promise<Conn> {
    for (let hop = 0; ; hop++) {
      const res = await dial(wsUrl(addr, this.#secure), {
        timeoutMs: this.#dialTimeoutMs,
        ...(this.#token !== undefined ? { token: this.#token } : {}),
        ...(this.#tls !== undefined ? { tls: this.#tls } : {}),
        ...(this.#webSocket !== undefined ? { webSocket: this.#webSocket } : {}),
      });
      if ("redirect" in res) {
        if (!res.redirect || res.redirect === addr || hop >= this.#maxHops) {
          throw new LockgateError("unavailable", `lockgate: dial ${addr}: redirected (to ${res.redirect || "nobody"}) too often`);
        }
        this.#log(`handshake redirected from ${addr} to ${res.redirect}`);
        addr = res.redirect;
        continue;
      }
      return new Conn(res as Sock, addr, (r) => this.#onWanted(r), (m) => this.#log(m));
    }
  }

  #pick(avoid: string): string {
    const n = this.#endpoints.length;
    let i = Math.floor(Math.random() * n);
    if (n > 1 && this.#endpoints[i] === avoid) i = (i + 1 + Math.floor(Math.random() * (n - 1))) % n;
    return this.#endpoints[i]!;
  }

  #onWanted(r: Reply): void {
    if (!r.lockToken) return;
    const lease = this.#held.get(heldKey(r.key ?? "", r.lockToken));
    if (lease) lease._markWanted();
    else if (this.#early.has(r.lockToken)) this.#early.set(r.lockToken, true);
  }
}

export type { HolderInfo };
