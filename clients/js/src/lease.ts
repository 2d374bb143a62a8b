/**
 * A held lock: its tokens, its deadline, and the signals of its end.
 */
import { LockgateError, NotHeldError } from "./errors.js";
import type { Session } from "./session.js";
import { KeepAlive } from "./keepalive.js";
import { deadlineOf, now } from "./timing.js";

/** How a lease holds its key: alone ("exclusive"), or beside other shared holders ("shared": read locks and semaphore permits). */
export type Mode = "exclusive" | "shared";

/** Why a lease ended. */
export type LostReason = "expired" | "not_held" | "released";

/** LeaseLostError is the reason of a lease's `signal` once it ends. */
export class LeaseLostError extends LockgateError {
  override name = "LeaseLostError";
  readonly reason: LostReason;
  constructor(key: string, reason: LostReason) {
    super("not_held", `lockgate: lease of ${JSON.stringify(key)} ended: ${reason}`);
    this.reason = reason;
  }
}

/** What a Lease needs from its Client. @internal */
export interface LeaseOps {
  /** Renews; resolves with the send time of the answered copy; throws NotHeldError when the server says so. */
  renew(lease: Lease, ttlMs: number, signal?: AbortSignal): Promise<number>;
  release(lease: Lease): Promise<void>;
  untrack(lease: Lease): void;
}

/** @internal */
export interface LeaseInit {
  key: string;
  owner: string;
  lockToken: string;
  fencingToken: bigint;
  ttlMs: number;
  sent: number;
  value?: string;
  autoRenew: boolean;
  wanted: boolean;
  mode?: Mode;
  permits?: number;
  /** The session the lease belongs to: its TTL, sent and deadline are the session's, and it ends with it. */
  session?: Session;
}

/**
 * Lease is a granted lock. Act as the holder only while `signal` is not
 * aborted (equivalently, before `deadline` by performance.now()), and send
 * `fencingToken` with every write to a fenced resource.
 */
export class Lease {
  /** The lock's key. */
  readonly key: string;
  /** The owner (client id) recorded with the lock. */
  readonly owner: string;
  /** The lease's secret handle; renew and release send it. */
  readonly lockToken: string;
  /**
   * The fencing token: strictly increasing across successive grants of the
   * key. A bigint, so that every 64-bit value is exact.
   */
  readonly fencingToken: bigint;
  /** The value stored with the lock, if any. */
  readonly value: string | undefined;
  /** "shared" for a read lock or a semaphore permit, else "exclusive". */
  readonly mode: Mode;
  /** A semaphore permit's number of permits (0 otherwise). */
  readonly permits: number;
  /** Resolves with the reason once the lease ends (it never rejects). */
  readonly lost: Promise<LostReason>;
  /** Aborted once the lease ends (reason: a LeaseLostError): the counterpart of Go's Lease.Done. */
  readonly signal: AbortSignal;
  /** Resolves when another caller waits for this key (the gateway's "wanted" push). A hint, never a revocation. */
  readonly wanted: Promise<void>;
  /**
   * The session the lease belongs to, or undefined: a session lease is
   * renewed by its session's keep-alive (its own autoRenew is off), its
   * deadline is the session's, and it ends when the session does.
   */
  readonly session: Session | undefined;

  #ops: LeaseOps;
  #ttlMs: number;
  #sent: number;
  #deadline: number;
  #reason: LostReason | undefined;
  #isWanted = false;
  #resolveLost!: (r: LostReason) => void;
  #resolveWanted!: () => void;
  #abort = new AbortController();
  /** The deadline timer and, with autoRenew, the renewals (keepalive.ts, as a session's keep-alive). */
  #keep: KeepAlive;

  /** @internal */
  constructor(ops: LeaseOps, g: LeaseInit) {
    this.#ops = ops;
    this.key = g.key;
    this.owner = g.owner;
    this.lockToken = g.lockToken;
    this.fencingToken = g.fencingToken;
    this.value = g.value;
    this.mode = g.mode ?? "exclusive";
    this.permits = g.permits ?? 0;
    this.session = g.session;
    this.#ttlMs = g.session ? g.session.ttlMs : g.ttlMs;
    this.#sent = g.session ? g.session.sent : g.sent;
    this.#deadline = deadlineOf(this.#sent, this.#ttlMs);
    this.lost = new Promise((res) => (this.#resolveLost = res));
    this.wanted = new Promise((res) => (this.#resolveWanted = res));
    this.signal = this.#abort.signal;
    const lease = this;
    this.#keep = new KeepAlive(
      {
        get ttlMs() {
          return lease.#ttlMs;
        },
        get sent() {
          return lease.#sent;
        },
        get deadline() {
          return lease.#deadline;
        },
        get reason() {
          return lease.#reason;
        },
        renewOnce: (signal) => this.#ops.renew(this, this.#ttlMs, signal),
        renewed: (sent) => this._renewed(sent, this.#ttlMs),
        isLoss: (e) => e instanceof NotHeldError,
        end: (reason) => this._end(reason),
      },
      g.session ? false : g.autoRenew,
      "renewal",
    );
    if (g.wanted) this._markWanted();
    if (g.session && !g.session._add(this)) {
      this._end(g.session.reason ?? "expired");
      return;
    }
    this.#keep.extended();
  }

  /** The TTL of the last grant or renewal, ms. */
  get ttlMs(): number {
    return this.#ttlMs;
  }

  /** When the request that started the current TTL was sent (performance.now() ms). */
  get sent(): number {
    return this.#sent;
  }

  /** The last instant, on performance.now()'s clock, the holder may act: sent + ttl − (ttl·0.01 + 2 ms). */
  get deadline(): number {
    return this.#deadline;
  }

  /** Why the lease ended; undefined while it is held. */
  get reason(): LostReason | undefined {
    return this.#reason;
  }

  /** Whether another caller was reported waiting for the key. */
  get isWanted(): boolean {
    return this.#isWanted;
  }

  /** Whether the lease is still held by this client's clock. */
  get held(): boolean {
    return this.#reason === undefined && now() < this.#deadline;
  }

  /** Whether auto-renew runs. */
  get autoRenew(): boolean {
    return this.#keep.renewing;
  }

  /** release frees the lock; a lease that is no longer held on the server gives NotHeldError. */
  release(): Promise<void> {
    return this.#ops.release(this);
  }

  /**
   * renew extends the lease to ttlMs (default: its current TTL); NotHeldError
   * ends it. A session lease renews its session (every lease in it), whose
   * TTL it keeps: another ttlMs is refused (invalid_ttl).
   */
  async renew(ttlMs?: number): Promise<void> {
    if (this.#reason !== undefined) throw new NotHeldError(`lockgate: renew ${JSON.stringify(this.key)}: the lease ended (${this.#reason})`);
    if (this.session) {
      if (ttlMs !== undefined && ttlMs !== this.session.ttlMs) {
        throw new LockgateError("invalid_ttl", `lockgate: renew ${JSON.stringify(this.key)}: a lease in a session keeps the session's TTL (${this.session.ttlMs} ms)`);
      }
      return this.session.renew();
    }
    const ttl = ttlMs ?? this.#ttlMs;
    try {
      const sent = await this.#ops.renew(this, ttl, this.signal);
      this._renewed(sent, ttl);
    } catch (e) {
      if (e instanceof NotHeldError) this._end("not_held");
      throw e;
    }
  }

  /** `await using lease = await client.acquire(k)` releases it at the end of the block (errors of an ended lease are ignored). */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#reason !== undefined) return;
    try {
      await this.release();
    } catch (e) {
      if (!(e instanceof NotHeldError)) throw e;
    }
  }

  /** @internal A renewal sent at `sent` succeeded with ttlMs. */
  _renewed(sent: number, ttlMs: number): void {
    if (this.#reason !== undefined) return;
    this.#ttlMs = ttlMs;
    // A later answer for an older copy must not move the deadline back.
    if (deadlineOf(sent, ttlMs) > this.#deadline || sent > this.#sent) {
      this.#sent = sent;
      this.#deadline = deadlineOf(sent, ttlMs);
    }
    this.#keep.extended();
  }

  /** @internal The gateway reported a waiter for the key. */
  _markWanted(): void {
    if (this.#isWanted) return;
    this.#isWanted = true;
    this.#resolveWanted();
  }

  /** @internal Ends the lease (once). */
  _end(reason: LostReason): void {
    if (this.#reason !== undefined) return;
    this.#reason = reason;
    this.#keep.end();
    this.#ops.untrack(this);
    this.session?._remove(this);
    this.#abort.abort(new LeaseLostError(this.key, reason));
    this.#resolveLost(reason);
  }

  /** @internal Stops auto-renew (the client closed); the deadline still ends the lease. */
  _stopRenewing(): void {
    this.#keep.stop();
  }
}
