/**
 * The Client's options and the shapes of what it reports, with their
 * defaults.
 */
import type { Session } from "./session.js";
import type { Mode } from "./lease.js";
import type { TlsOptions } from "./socket.js";

/** Defaults of ClientOptions. */
export const DefaultDialTimeoutMs = 5_000;
export const DefaultRequestTimeoutMs = 10_000;
export const DefaultMaxHops = 5;
/** How long after a refused open of the client's own session its leases renew themselves before an acquire tries again (ClientOptions.sessionRetryMs). */
export const DefaultSessionRetryMs = 30_000;

/** What became of the client's own session (Client.sessionStats()); like the Go SDK's client.SessionStats. */
export interface SessionStats {
  /** Sessions the client opened for its own use. */
  opened: number;
  /** Opens of its own session the gateway refused with quota_exceeded or too_many_sessions. */
  refused: number;
  /**
   * Acquires whose leases would have gone into the client's session but
   * were made without one, renewed on their own, because opening it was
   * refused (now, or less than sessionRetryMs before).
   */
  fallbacks: number;
  /** Whether the client is falling back now: its last open was refused and none has succeeded since. */
  fallingBack: boolean;
}

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
  /**
   * Receives connection events (reconnects, redirects) and warnings.
   * Default: events go nowhere, warnings (a refused session) to
   * console.warn.
   */
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
  /**
   * Sessions (default true): when the gateway offers "sessions"
   * (Lockgate-Features), every lease acquired without ttlMs (auto-renewed)
   * goes into one session of this client, opened on first use, and one
   * keep-alive every ttl/3 renews them all instead of one renewal per
   * lease. false: every auto-renewed lease renews itself. With cacheLeases
   * on the client has no session of its own either (as the Go SDK).
   *
   * A gateway that refuses to open the session — quota_exceeded (the
   * identity's quota of sessions) or too_many_sessions — never fails an
   * acquire: the lease renews itself instead (with sessionTtlMs when set),
   * a warning is logged once until a session opens again, sessionStats()
   * counts it, and the session is asked for again at the first acquire
   * after sessionRetryMs. A forbidden open fails the acquire.
   */
  sessions?: boolean;
  /** The TTL of the client's session (10 ms … 24 h), and of the auto-renewed leases that renew themselves because it could not be had. Default: the server's (20 s). */
  sessionTtlMs?: number;
  /** How long after a refused open of the client's session acquires go without one before they ask again. Default 30 s. */
  sessionRetryMs?: number;
}

/** openSession's options. */
export interface SessionOptions {
  /** The session's TTL in ms (10 ms … 24 h). Default: the client's sessionTtlMs, else the server's (20 s). */
  ttlMs?: number;
  /** The owner the session is opened for. Default: the client's id. */
  clientId?: string;
  /** Renew every ttl/3 until the session ends or the client closes (default true). */
  keepAlive?: boolean;
  /** Aborting it gives up the open (CancelledError). */
  signal?: AbortSignal;
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
  /**
   * The session to put the lease in (needs "sessions"): it takes the
   * session's TTL (leave ttlMs absent or equal), is renewed by the
   * session's keep-alive and ends with the session. null: in no session,
   * renewed on its own. Absent: the client's own session for a lease
   * without ttlMs (ClientOptions.sessions), else none.
   */
  session?: Session | null;
}

/** One holder of a shared key, as inspect reports it. */
export interface HolderDetail {
  owner: string;
  fencingToken: bigint | undefined;
  value: string | undefined;
  expiresInMs: number | undefined;
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
