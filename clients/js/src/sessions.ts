/**
 * Sessions on the client's side: opening, renewing and closing them, and
 * the client's own session, into which every auto-renewed lease goes when
 * the gateway offers "sessions" (ClientOptions.sessions). The keep-alive
 * itself is the Session's (keepalive.ts, as a lease's auto-renew).
 */
import { CancelledError, LockgateError, SessionExpiredError, UnsupportedError } from "./errors.js";
import { abortable, closedError, newCall, type Call, type Calls, type Env } from "./calls.js";
import type { Conn } from "./conn.js";
import type { Connection } from "./connection.js";
import type { AcquireOptions, SessionOptions, SessionStats } from "./options.js";
import type { Prepared } from "./primitives.js";
import { Session, type SessionOps } from "./session.js";
import { BackoffBaseMs, now } from "./timing.js";
import { Cmd, checkOwner, checkTtl, type Reply, type Request } from "./wire.js";

/** Marks an acquire whose lease would have gone into the client's own session and renews itself instead. @internal */
export const Outside = Symbol("outside the session");

/** How a Client uses sessions. @internal */
export interface SessionSettings {
  useSessions: boolean;
  sessionTtlMs: number | undefined;
  sessionRetryMs: number;
  warn: (msg: string) => void;
}

/** The sessions of a Client. @internal */
export class Sessions {
  readonly useSessions: boolean;
  readonly sessionTtlMs: number | undefined;
  readonly sessionOps: SessionOps;
  // Sessions: the client's own (opened on first use), an open of it under
  // way, every live session this client opened, and the connection on which
  // the gateway was found to offer none.
  sessions = new Set<Session>();
  ownSession: Session | undefined;
  ownOpening: Promise<Session | typeof Outside | undefined> | undefined;
  noSessionsOn: Conn | undefined;
  // A refused open of the client's own session: none is asked for before
  // ownRetryAt; fallingBack from the refusal until one opens (warned
  // once); what became of the session, for sessionStats().
  readonly sessionRetryMs: number;
  ownRetryAt = 0;
  fallingBack = false;
  sessionCounts = { opened: 0, refused: 0, fallbacks: 0 };
  readonly warn: (msg: string) => void;

  constructor(
    readonly env: Env,
    readonly calls: Calls,
    readonly conns: Connection,
    readonly clientId: string,
    o: SessionSettings,
  ) {
    this.useSessions = o.useSessions;
    this.sessionTtlMs = o.sessionTtlMs;
    this.sessionRetryMs = o.sessionRetryMs;
    this.warn = o.warn;
    this.sessionOps = {
      renew: (s, signal) => this.env.track(this.renewSession(s, signal)),
      close: (s) => this.env.track(this.closeSession(s)),
      forget: (s) => {
        this.sessions.delete(s);
        if (this.ownSession === s) this.ownSession = undefined;
      },
    };
  }

  /** What became of the client's own session. */
  stats(): SessionStats {
    return { ...this.sessionCounts, fallingBack: this.fallingBack };
  }

  /**
   * sessionFor is the session an acquire's lease goes into: the caller's
   * (opts.session, checked), none (null, an explicit ttlMs, no auto-renew,
   * sessions off), or the client's own, opened on first use; Outside when
   * the lease would have gone into the client's own session but cannot
   * (the gateway refused it, now or less than sessionRetryMs ago, or
   * opening it failed).
   */
  async sessionFor(opts: AcquireOptions, p: Prepared): Promise<Session | typeof Outside | undefined> {
    const s = opts.session;
    if (s === null) return undefined;
    if (s !== undefined) {
      if (!(s instanceof Session)) throw new LockgateError("bad_json", "lockgate: session is not a Session of this client");
      if (opts.ttlMs !== undefined && opts.ttlMs !== s.ttlMs) {
        throw new LockgateError("invalid_ttl", `lockgate: a lease in a session takes the session's TTL (${s.ttlMs} ms): leave ttlMs absent`);
      }
      if (s.reason !== undefined) throw new SessionExpiredError(`lockgate: acquire in a session that ended (${s.reason})`);
      return s;
    }
    if (!this.useSessions || opts.ttlMs !== undefined || !p.autoRenew) return undefined;
    const own = this.ownSession;
    if (own && own.alive) return own;
    const conn = this.conns.conn;
    if (conn && !conn.closed && (this.noSessionsOn === conn || (conn.featuresKnown && !conn.features.includes("sessions")))) return undefined;
    if (this.fallingBack && now() < this.ownRetryAt) {
      this.sessionCounts.fallbacks++;
      return Outside;
    }
    this.ownOpening ??= this.openOwn().finally(() => (this.ownOpening = undefined));
    const got = opts.signal
      ? await abortable(this.ownOpening, opts.signal).catch((e) => {
          throw opts.signal!.aborted ? new CancelledError("lockgate: acquire: cancelled by the caller", opts.signal!.reason) : e;
        })
      : await this.ownOpening;
    if (got === Outside && this.fallingBack) this.sessionCounts.fallbacks++;
    return got;
  }

  /** outside is p for a lease that would have gone into the client's session and renews itself: the session's TTL when sessionTtlMs sets one. */
  outside(p: Prepared): Prepared {
    return this.sessionTtlMs !== undefined ? { ...p, ttlMs: this.sessionTtlMs } : p;
  }

  /**
   * openOwn opens the client's own session. A gateway without sessions
   * (not announced, or an older one answering unknown_command) is
   * remembered for its connection (undefined: the lease renews itself, as
   * everywhere on that gateway). A refusal — quota_exceeded,
   * too_many_sessions — starts a fallback period: acquires go without the
   * session (Outside) and ask again after sessionRetryMs; it is warned of
   * once per period and counted. forbidden and unauthorized fail the
   * acquire; any other failure but the client's close leaves it to a
   * lease that renews itself (Outside).
   */
  async openOwn(): Promise<Session | typeof Outside | undefined> {
    try {
      const s = await this.openSession({});
      if (this.env.closed()) return undefined;
      this.ownSession = s;
      this.sessionCounts.opened++;
      if (this.fallingBack) this.env.log("the client's session opened after refusals; auto-renewed leases go into it again");
      this.fallingBack = false;
      return s;
    } catch (e) {
      if (this.env.closed() || (e instanceof LockgateError && e.code === "closed")) throw closedError();
      const code = e instanceof LockgateError ? e.code : "";
      if (e instanceof UnsupportedError || code === "unknown_command") {
        this.noSessionsOn = this.conns.conn;
        return undefined;
      }
      if (code === "forbidden" || code === "unauthorized") throw e;
      if (code === "quota_exceeded" || code === "too_many_sessions") {
        this.sessionCounts.refused++;
        this.ownRetryAt = now() + this.sessionRetryMs;
        if (!this.fallingBack) {
          this.fallingBack = true;
          this.warn(
            `lockgate: the gateway refused the client's session (${(e as Error).message}); auto-renewed leases renew themselves one by one until it opens (asked again after ${this.sessionRetryMs} ms)`,
          );
        } else {
          this.env.log(`the gateway refused the client's session again: ${(e as Error).message}`);
        }
        return Outside;
      }
      this.env.log(`opening the client's session failed; the lease renews itself: ${(e as Error).message}`);
      return Outside;
    }
  }

  async openSession(o: SessionOptions): Promise<Session> {
    if (this.env.closed()) throw closedError();
    const ttl = o.ttlMs ?? this.sessionTtlMs;
    if (ttl !== undefined) checkTtl(ttl);
    const owner = o.clientId ?? this.clientId;
    checkOwner(owner);
    const req: Request = { commandType: Cmd.openSession, clientId: owner };
    if (ttl !== undefined) req.ttl = ttl;
    const k = newCall("open-session", req, { needs: ["sessions"] });
    const r = await this.calls.oneShot(k, o.signal);
    if (r.type !== "session") throw this.calls.unexpected(r, k, "session");
    if (!r.sessionId || typeof r.ttl !== "number" || !(r.ttl > 0)) {
      throw new LockgateError("unavailable", "lockgate: open-session: a session reply without sessionId or ttl");
    }
    // The TTL started on the server after the first copy went out (a
    // re-sent open may have opened a second session; the one answered
    // started no earlier). Never count on more than was asked for.
    const s = new Session(this.sessionOps, {
      id: r.sessionId,
      owner,
      ttlMs: ttl !== undefined ? Math.min(ttl, r.ttl) : r.ttl,
      sent: k.first,
      keepAlive: (o.keepAlive ?? true) && !this.env.closed(),
    });
    this.sessions.add(s);
    return s;
  }

  /** renewSession is one keep-alive of s: the answered copy's send time; SessionExpiredError (s ends "not_held") when the server no longer has it. */
  async renewSession(s: Session, signal?: AbortSignal): Promise<number> {
    if (this.env.closed()) throw closedError();
    // During an election the retries must not sleep past the session's deadline.
    // ttl: a gateway that has not seen the session (a new leader's) takes it as the session's.
    const k = newCall("renew-session", { commandType: Cmd.renewSession, sessionId: s.id, ttl: s.ttlMs }, { maxBackoffMs: Math.max(BackoffBaseMs, s.ttlMs / 10) });
    const r = await this.calls.oneShot(k, signal);
    if (r.type === "sessionRenewed") return k.last;
    if (r.error?.code === "session_expired" || r.error?.code === "not_held") {
      s._end("not_held");
      throw new SessionExpiredError(`lockgate: renew-session: ${r.error.code}${r.error.message ? ": " + r.error.message : ""}`);
    }
    throw this.calls.unexpected(r, k, "sessionRenewed");
  }

  /**
   * closeSession closes s on the server, releasing every lease in it. A
   * re-sent close answered session_expired, whose earlier copy may have
   * arrived, counts as closed when the session was alive by our clock as
   * the answered copy went out (as release judges a re-sent release).
   */
  async closeSession(s: Session): Promise<void> {
    if (this.env.closed()) throw closedError();
    let alive = false;
    const k = newCall("close-session", { commandType: Cmd.closeSession, sessionId: s.id }, { onSend: (t) => (alive = s.reason === undefined && t < s.deadline) });
    const r = await this.calls.oneShot(k);
    if (r.type === "sessionClosed") {
      s._end("released");
      return;
    }
    if (r.error?.code === "session_expired") {
      if (k.prior && alive) {
        s._end("released");
        return;
      }
      s._end("not_held");
      throw new SessionExpiredError(`lockgate: close-session: session_expired${r.error.message ? ": " + r.error.message : ""}`);
    }
    throw this.calls.unexpected(r, k, "sessionClosed");
  }

  /** sessionFields puts an acquire's lease in session: its id, and no ttl (the lease takes the session's). */
  sessionFields(req: Request, session: Session | undefined): void {
    if (!session) return;
    req.sessionId = session.id;
    delete req.ttl;
  }

  /**
   * sessionGone handles an acquire answered session_expired: the session
   * ends here too (its leases "not_held"); the client's own session is
   * replaced and the acquire tried again, once (true); a caller's session
   * fails it.
   */
  sessionGone(r: Reply, k: Call, opts: AcquireOptions, session: Session | undefined, before: number): boolean {
    if (!session || r.error?.code !== "session_expired") return false;
    session._end("not_held");
    if (opts.session !== undefined || before > 0) throw this.calls.unexpected(r, k, "grant");
    this.env.log(`the client's session is gone on the server; ${k.op} ${this.calls.what(k)} again in a new one`);
    return true;
  }
}
