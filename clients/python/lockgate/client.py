"""The lockgate client: one multiplexed WebSocket connection, kept alive
across gateway failures and leader changes.

A Client keeps one connection, to an endpoint picked at random, and sends
every request on it with its own id; a reader task hands each reply to the
request waiting for it. A gateway that answers ``not_leader`` with the
leader's address is left for that address (at most ``max_hops`` hops per
request, then the request backs off); a connection that fails, or a gateway
that answers ``closed`` (or ``unavailable`` three times in a row), is
replaced with backoff and jitter, preferring another endpoint.

Recovery: every acquire carries a client-chosen lock token. When the
connection drops or the leader changes, every pending request is re-sent on
the new connection; an acquire with the same token, so that on raftlock a
re-sent acquire whose first copy was already granted gets that grant back
instead of queueing behind it. A re-sent release answered ``not_held`` is
judged as the Go SDK judges it (client/client.go): a success if the lease
was alive by the holder's clock when the answered copy went out, else an
``UnavailableError`` saying the outcome is unknown.

Deadlines: a lease's deadline is ``sent + ttl − (ttl/100 + 2 ms)`` on the
monotonic clock, where ``sent`` is when the first copy of its acquire (or
its latest successful renew) was sent. A grant that arrives with less than
half its TTL left is renewed at once.

Sessions: when the gateway offers ``sessions``, every lease
acquired without a TTL (auto-renewed) goes into one session of the client,
opened on first use, and one keep-alive every ttl/3 renews them all. A
session lease's deadline is its session's: the same rule, ``sent`` being
when the last successful openSession or renewSession was sent.
"""

from __future__ import annotations

import asyncio
import math
import contextlib
import itertools
import logging
import random
import ssl as _ssl
import time
from typing import Any, AsyncIterator, Dict, List, Optional, Sequence, Union

from . import _conn
from ._cache import DEFAULT_CACHE_IDLE, DEFAULT_MAX_CACHED_LEASES, CacheStats, LeaseCache
from ._conn import CLOSING, DROPPED, Conn, ConnectError
from ._wire import (
    CMD_ACQUIRE, CMD_ACQUIRE_ALL, CMD_CANCEL, CMD_CLOSE_SESSION, CMD_INSPECT, CMD_OPEN_SESSION, CMD_RELEASE,
    CMD_RENEW, CMD_RENEW_SESSION, CMD_TRY_ACQUIRE, CMD_TRY_ACQUIRE_ALL, DEFAULT_TTL, backoff, ms, new_handle,
    parse_token, validate_key, validate_keys, validate_primitives, validate_ttl, validate_value, ws_url,
)
from .errors import (
    ClosedError, LockgateError, LockTimeoutError, NotHeldError, NotLeaderError, SessionExpiredError,
    UnauthorizedError, UnavailableError, UnsupportedError, ValidationError, error_from_reply,
)
from .lease import HolderInfo, Lease, LockInfo
from .session import Session, SessionStats
from .watch import Watch

__all__ = ["Client"]

log = logging.getLogger("lockgate")

DEFAULT_REQUEST_TIMEOUT = 10.0
DEFAULT_DIAL_TIMEOUT = 5.0
DEFAULT_MAX_HOPS = 5
DEAD_FOR = 1.0  #: seconds a redirect to an address that just failed a dial is not followed
MAX_EARLY_WANTED = 1024
#: seconds after a refused open of the client's own session before an acquire asks for it again
DEFAULT_SESSION_RETRY = 30.0


class _Outside:
    """Marks an acquire whose lease would have gone into the client's own
    session and renews itself instead (the session was refused, or could
    not be opened)."""

    def __repr__(self) -> str:
        return "OUTSIDE"


OUTSIDE = _Outside()


def _acquire_defaults(ttl: Optional[float], auto_renew: Optional[bool],
                      wait: Optional[float]) -> "tuple[float, bool]":
    """An acquire's TTL and auto-renewal once defaulted: without a TTL the
    lease has DEFAULT_TTL and is renewed unless auto_renew says otherwise.
    A negative wait is refused."""
    if auto_renew is None:
        auto_renew = ttl is None
    if ttl is None:
        ttl = DEFAULT_TTL
    if wait is not None and wait < 0:
        raise ValueError("lockgate: wait must be ≥ 0 seconds")
    return ttl, auto_renew


class _Call:
    """One logical request, sent once per connection attempt (each copy with
    a fresh id) until it is answered."""

    __slots__ = ("op", "req", "wait", "grantable", "sends", "first", "last", "prior", "last_error", "on_send", "needs")

    def __init__(self, op: str, req: Dict[str, Any], wait: bool = False, grantable: bool = False,
                 needs: Optional[List[str]] = None) -> None:
        self.op = op
        # Gateway features the request needs: refused locally
        # (UnsupportedError) on a gateway that did not announce one.
        self.needs = needs or []
        self.req = req
        self.wait = wait  # a waiting acquire: cancelled on the gateway when given up
        self.grantable = grantable  # the answer may be a grant that must be released if nobody takes it
        self.sends = 0
        self.first = 0.0  # monotonic send time of the first copy
        self.last = 0.0  # of the answered copy
        # Whether an earlier copy than the answered one may have taken
        # effect: its connection failed before the answer, or it was
        # answered unavailable. Copies answered not_leader or closed did nothing.
        self.prior = False
        self.last_error: Optional[BaseException] = None
        self.on_send: Any = None

    def what(self) -> str:
        return f"{self.op} {self.req.get('key', self.req.get('keys'))!r}"


class Client:
    """A client of lockgate gateways.

    ``endpoints``: ``"host:port"`` strings (or ws/wss/http/https URLs), or
    one comma-separated string. ``client_id`` is the owner recorded with
    locks (default ``"py-"`` + 12 random hex digits). ``token`` is the bearer
    token, sent as ``Authorization: Bearer`` and as the
    ``lockgate.bearer.<base64url>`` subprotocol. ``request_timeout`` bounds
    try-acquire, renew, release and inspect (with their re-sends), in
    seconds. ``ssl`` makes the client speak TLS (wss://) to bare host:port
    endpoints and to redirect targets.

    ``cache_leases`` (off by default) turns on the lease cache: releasing a
    lease keeps it, unused and still renewed, so that the next acquire of
    its key with the same options returns the same Lease (same fencing
    token) without a round trip; it is released for real the moment another
    caller waits for the key (the gateway's ``wanted`` push), after
    ``cache_idle`` seconds unused, and at close. At most
    ``max_cached_leases`` are kept unused. Leases are kept only while the
    gateway announces ``wanted`` pushes (``Lockgate-Features: wanted``).
    See :meth:`cache_stats` and docs/lease-cache.md.

    ``sessions`` (on by default): when the gateway offers ``sessions``
    (``Lockgate-Features``), every lease acquired without ``ttl``
    (auto-renewed) goes into one session of this client (:attr:`session`),
    opened on first use with ``session_ttl`` seconds (default: the server's,
    20 s), and one keep-alive every ttl/3 renews them all instead of one
    renewal per lease. A refused keep-alive or the session's deadline passing
    ends every lease in it. ``sessions=False``: every auto-renewed lease
    renews itself; with ``cache_leases`` the client has no session of its
    own either (as the Go SDK). :meth:`open_session` opens sessions of your
    own. A gateway that refuses to open the client's session —
    ``quota_exceeded`` (the identity's quota of sessions) or
    ``too_many_sessions`` — never fails an acquire: the lease renews itself
    instead (with ``session_ttl`` when set), a warning is logged once until a
    session opens again, :meth:`session_stats` counts it, and the first
    acquire after ``session_retry`` seconds asks again. A ``forbidden`` open
    fails the acquire.

    A waiting acquire answered ``rate_limited`` waits the time the gateway
    names and sends it again (within its ``wait``); a try-acquire raises
    RateLimitedError (``retry_in``).

    Use it as an async context manager, or call :meth:`close`.
    """

    def __init__(self, endpoints: Union[str, Sequence[str]], client_id: Optional[str] = None,
                 token: Optional[str] = None, request_timeout: float = DEFAULT_REQUEST_TIMEOUT, *,
                 dial_timeout: float = DEFAULT_DIAL_TIMEOUT, max_hops: int = DEFAULT_MAX_HOPS,
                 ssl: Optional[_ssl.SSLContext] = None, cache_leases: bool = False,
                 cache_idle: float = DEFAULT_CACHE_IDLE, max_cached_leases: int = DEFAULT_MAX_CACHED_LEASES,
                 sessions: bool = True, session_ttl: Optional[float] = None,
                 session_retry: float = DEFAULT_SESSION_RETRY) -> None:
        if isinstance(endpoints, str):
            endpoints = [e.strip() for e in endpoints.split(",") if e.strip()]
        self.endpoints: List[str] = list(endpoints)
        if not self.endpoints:
            raise ValueError("lockgate: no endpoints")
        secure = ssl is not None
        for e in self.endpoints:
            secure = secure or ws_url(e, False).startswith("wss:")
        for e in self.endpoints:
            if secure and not ws_url(e, True).startswith("wss:"):
                raise ValueError(f"lockgate: endpoint {e!r} is plaintext while the client speaks TLS")
        self._secure = secure
        self._ssl = ssl if ssl is not None else (_ssl.create_default_context() if secure else None)
        self.client_id = client_id or "py-" + new_handle()[:12]
        self._token = token
        self.request_timeout = float(request_timeout)
        self.dial_timeout = float(dial_timeout)
        self.max_hops = max_hops

        self._ids = itertools.count(1)
        self._closed = False
        self._run_task: Optional[asyncio.Task] = None
        self._cur: Optional[Conn] = None
        self._ready: Optional[asyncio.Event] = None
        self._dead: Dict[str, float] = {}
        self._dial_error: Optional[BaseException] = None
        # Live leases by (lock token, key), for "wanted" pushes (raftlock
        # gives every lease of an acquire_all the same lock token).
        self._held: Dict["tuple[str, str]", Lease] = {}
        self._early_wanted: Dict["tuple[str, str]", None] = {}  # wanted before their grant was handled
        self._waits: set = set()  # reply queues of waiting acquires, told CLOSING at close
        self._calls = 0
        self._idle: Optional[asyncio.Event] = None
        self.signals_wanted = False  #: the gateway announced "wanted" pushes (Lockgate-Features)
        if cache_idle <= 0 or max_cached_leases < 1:
            raise ValueError("lockgate: cache_idle must be > 0 seconds and max_cached_leases ≥ 1")
        self._cache: Optional[LeaseCache] = LeaseCache(self, float(cache_idle), max_cached_leases) if cache_leases else None
        self._closing = False
        # Sessions: the client's own (opened on first use), an open of it
        # under way, every live session this client opened, and the
        # connection whose gateway was found to offer none.
        self._use_sessions = bool(sessions) and not cache_leases  # as the Go SDK: the cache renews its own
        self._session_ttl = validate_ttl(session_ttl)
        self._own: Optional[Session] = None
        self._own_opening: Optional["asyncio.Future[Optional[Session]]"] = None
        self._sessions: Dict[Session, None] = {}
        self._no_sessions_on: Optional[Conn] = None
        # A refused open of the client's own session: none is asked for
        # before _own_retry_at; falling_back from the refusal until one
        # opens (warned once); what became of the session.
        if session_retry < 0:
            raise ValueError("lockgate: session_retry must be ≥ 0 seconds")
        self._session_retry = float(session_retry)
        self._own_retry_at = 0.0
        self._session_stats = SessionStats()

    def session_stats(self) -> SessionStats:
        """What became of the client's own session (``sessions=True``): all
        zero with sessions off or a gateway without them."""
        s = self._session_stats
        return SessionStats(s.opened, s.refused, s.fallbacks, s.falling_back)

    # -- lifecycle -------------------------------------------------------------

    async def __aenter__(self) -> "Client":
        self._start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _start(self) -> None:
        if self._run_task is None and not self._closed:
            self._ready = asyncio.Event()
            self._idle = asyncio.Event()
            self._idle.set()
            self._run_task = asyncio.get_running_loop().create_task(self._run())

    @property
    def endpoint(self) -> str:
        """The gateway the client is connected to (after redirects), or ""."""
        return self._cur.addr if self._cur is not None and not self._cur.closed else ""

    async def close(self) -> None:
        """Close the client: waiting acquires cancel their waits on the
        gateway (releasing a grant that raced in) and raise ClosedError,
        auto-renewals stop, later calls raise ClosedError. Leases kept unused
        by the lease cache are released first; other held leases stay held
        on the server until their TTL unless released first."""
        if self._closed or self._closing:
            return
        self._closing = True
        if self._cache is not None:
            await self._cache.close()  # while calls still go out
        self._closed = True
        for q in list(self._waits):
            q.put_nowait(CLOSING)
        if self._idle is not None and not self._idle.is_set():
            try:
                await asyncio.wait_for(self._idle.wait(), self.request_timeout)
            except asyncio.TimeoutError:
                log.warning("lockgate: close: calls still in flight; closing the connection under them")
        for lease in list(self._held.values()):
            if lease._keepalive is not None:
                lease._keepalive.cancel()
                lease._keepalive = None
        # As the Go SDK: the keep-alives stop, and the sessions' leases run out.
        for s in list(self._sessions):
            s.stop_keep_alive()
        if self._run_task is not None:
            self._run_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._run_task
        if self._cur is not None:
            await self._cur.go_away()
            self._cur = None
        if self._ready is not None:
            self._ready.set()

    @contextlib.contextmanager
    def _enter(self):  # type: ignore[no-untyped-def]
        if self._closed:
            raise ClosedError()
        self._start()
        self._calls += 1
        assert self._idle is not None
        self._idle.clear()
        try:
            yield
        finally:
            self._calls -= 1
            if self._calls == 0:
                self._idle.set()

    # -- the connection ----------------------------------------------------------

    async def _run(self) -> None:
        attempt = 0
        nxt = ""
        avoid = ""
        while not self._closed:
            addr = nxt or self._pick(avoid)
            nxt = ""
            try:
                wc = await _conn.dial(addr, secure=self._secure, token=self._token, ssl=self._ssl,
                                      timeout=self.dial_timeout, max_hops=self.max_hops, on_push=self._on_push)
            except (ConnectError, UnauthorizedError, ValueError) as e:
                self._dial_error = e
                self._dead[addr] = time.monotonic()
                attempt += 1
                avoid = addr
                log.info("lockgate: connect to %s failed (attempt %d): %s", addr, attempt, e)
                await asyncio.sleep(backoff(attempt))
                continue
            self._dial_error = None
            self._dead.pop(addr, None)
            self.signals_wanted = wc.wanted
            self._cur = wc
            assert self._ready is not None
            self._ready.set()
            log.debug("lockgate: connected to %s", wc.addr)
            await wc.done.wait()
            self._cur = None
            self._ready = asyncio.Event()
            avoid = wc.addr if wc.avoid else ""
            if wc.redirect:
                nxt = wc.redirect
                continue
            log.info("lockgate: connection to %s lost: %r", wc.addr, wc.cause)
            if wc.useful or time.monotonic() - wc.born > 10.0:
                attempt = 0  # a connection that worked: reconnect at once
                avoid = wc.addr  # prefer another gateway
                continue
            attempt += 1
            avoid = wc.addr
            await asyncio.sleep(backoff(attempt))

    @staticmethod
    def _check_features(wc: Conn, needs: List[str], what: str) -> None:
        """UnsupportedError, before anything is sent, for a feature the
        gateway did not announce."""
        for f in needs:
            if f not in wc.features:
                raise UnsupportedError(f"{what}: the gateway {wc.addr} does not offer {f!r} "
                                       f"(Lockgate-Features: {','.join(wc.features) or 'none'})", None, f)

    async def features(self) -> List[str]:
        """What the gateway the client is (or was last) connected to
        announced in its upgrade's ``Lockgate-Features``: wanted, shared,
        semaphore, multikey, watch, lockdelay. Connects first if needed,
        bounded by ``request_timeout`` (UnavailableError)."""
        with self._enter():
            try:
                async with asyncio.timeout(self.request_timeout):
                    wc = await self._conn()
            except TimeoutError:
                raise UnavailableError("unavailable", f"features: no connection within {self.request_timeout:g} s"
                                       + (f" (last failure: {self._dial_error})" if self._dial_error else "")) from None
            return list(wc.features)

    def watch(self, key: str) -> Watch:
        """Watch ``key``'s holder changes (the gateway's ``watch`` feature):
        an event per current holder, ``synced``, then every grant, release
        and expiry. ``async with client.watch(key) as w: async for ev in
        w: …`` (or ``w = await client.watch(key)``, then ``await
        w.aclose()``). The watch lives on one connection: when it is lost
        the iteration raises UnavailableError, when it fell behind
        WatchOverflowError; watch again, and the new watch starts with the
        current holders. Closing the watch (or the client) ends the
        iteration quietly."""
        validate_key(key)
        return Watch(self, key)

    def _pick(self, avoid: str) -> str:
        n = len(self.endpoints)
        i = random.randrange(n)
        if n > 1 and self.endpoints[i] == avoid:
            i = (i + 1 + random.randrange(n - 1)) % n
        return self.endpoints[i]

    def _is_dead(self, addr: str) -> bool:
        at = self._dead.get(addr)
        return at is not None and time.monotonic() - at < DEAD_FOR

    async def _conn(self) -> Conn:
        while True:
            if self._closed:
                raise ClosedError()
            wc = self._cur
            if wc is not None and not wc.closed:
                return wc
            assert self._ready is not None
            ready = self._ready
            if ready.is_set() and (self._cur is None or self._cur.closed):
                await asyncio.sleep(0)  # _run has not noticed the failure yet
                continue
            await ready.wait()

    def _on_push(self, r: Dict[str, Any]) -> None:
        tok = r.get("lockToken")
        if not isinstance(tok, str):
            return
        lease = self._held.get((tok, str(r.get("key"))))
        if lease is not None:
            # A caller may reuse a lock token: the push must name this grant.
            ft = parse_token(r.get("fencingToken"))
            if r.get("key") == lease.key and (ft is None or ft == lease.fencing_token):
                lease._mark_wanted()
            return
        # The push can beat the grant's handling (it follows the grant on the
        # wire, but the acquirer runs later): remember it, bounded.
        self._early_wanted[(tok, str(r.get("key")))] = None
        while len(self._early_wanted) > MAX_EARLY_WANTED:
            self._early_wanted.pop(next(iter(self._early_wanted)))

    def _track(self, lease: Lease) -> None:
        self._held[(lease.lock_token, lease.key)] = lease
        if self._early_wanted.pop((lease.lock_token, lease.key), 0) is None:
            lease._mark_wanted()

    def _untrack(self, lease: Lease) -> None:
        """The lease ended: it is forgotten (and leaves the lease cache)."""
        if self._held.get((lease.lock_token, lease.key)) is lease:
            del self._held[(lease.lock_token, lease.key)]
        if self._cache is not None:
            self._cache.drop(lease)

    def _wanted(self, lease: Lease) -> None:
        """The lease was marked wanted: the lease cache reclaims it if unused."""
        if self._cache is not None:
            self._cache.reclaim(lease)

    # -- the request loop ------------------------------------------------------

    async def _do(self, k: _Call) -> Dict[str, Any]:
        """Send ``k`` until it gets an answer that is not a transient failure.
        Dropped connections, not_leader, closed and unavailable answers are
        retried (redirects at once, the rest with backoff). The caller bounds
        it (asyncio.timeout, cancellation)."""
        hops = 0
        retry = 0
        while True:
            wc = await self._conn()
            self._check_features(wc, k.needs, k.what())
            rid = format(next(self._ids), "x")
            q = wc.register(rid)
            if q is None:
                await wc.done.wait()
                continue
            now = time.monotonic()
            if k.sends == 0:
                k.first = now
            k.sends += 1
            k.last = now
            k.req["id"] = rid
            if k.on_send is not None:
                k.on_send(now)
            if k.wait:
                self._waits.add(q)
            try:
                try:
                    await wc.send(k.req)
                except Exception as e:
                    wc.unregister(rid)
                    k.last_error = e
                    k.prior = True  # part of the frame may have gone out
                    continue
                r = await self._await(wc, rid, q, k)
            finally:
                self._waits.discard(q)
            if r is None:
                k.last_error = ConnectionError("connection to the gateway lost")
                k.prior = True
                log.debug("lockgate: re-sending %s after a dropped connection", k.what())
                continue
            code = r.get("error", {}).get("code") if r.get("type") == "error" and isinstance(r.get("error"), dict) else (
                "internal" if r.get("type") == "error" else None)
            if code == "not_leader":
                err = error_from_reply(r.get("error"), k.req.get("key"))
                k.last_error = err
                addr = err.leader_addr if isinstance(err, NotLeaderError) else ""
                if addr and self._is_dead(addr):
                    addr = ""  # the named leader just failed a dial: as if unknown
                if addr:
                    if hops < self.max_hops:
                        hops += 1
                        if addr != wc.addr:
                            # Every request on this connection would be redirected too: move it.
                            log.debug("lockgate: redirected from %s to the leader %s", wc.addr, addr)
                            wc.close_for(addr, False, err)
                            continue
                    elif not k.wait:
                        raise err
                    else:
                        hops = 0  # a waiting acquire keeps looking, after a pause
                retry += 1
                await asyncio.sleep(backoff(retry))
            elif code == "closed":
                k.last_error = error_from_reply(r.get("error"), k.req.get("key"))
                wc.close_for("", True, k.last_error)
            elif code in ("unavailable", "too_many_waiters"):
                k.last_error = error_from_reply(r.get("error"), k.req.get("key"))
                if code == "unavailable":
                    k.prior = True  # "outcome unknown for writes"
                    wc.strike()
                retry += 1
                await asyncio.sleep(backoff(retry))
            elif code == "cancelled" and k.wait:
                # We cancel only when giving up: the gateway dropped the wait. Queue again.
                k.last_error = error_from_reply(r.get("error"), k.req.get("key"))
                retry += 1
                await asyncio.sleep(backoff(retry))
            elif code == "rate_limited" and k.wait:
                # A waiting acquire waits out the identity's rate (the
                # request was not carried out) and sends it again, within
                # its wait; the others raise RateLimitedError.
                err = error_from_reply(r.get("error"), k.req.get("key"))
                k.last_error = err
                pause = getattr(err, "retry_in", 0.0)
                if pause <= 0:
                    retry += 1
                    pause = backoff(retry)
                log.debug("lockgate: %s rate-limited by %s; sending it again in %.3f s", k.what(), wc.addr, pause)
                await asyncio.sleep(pause)
            else:
                wc.good()
                return r

    async def _await(self, wc: Conn, rid: str, q: asyncio.Queue, k: _Call) -> Optional[Dict[str, Any]]:
        """The answer to the copy of ``k`` sent as ``rid``; None when the
        connection failed first. Cancelled (or, for a waiting acquire, the
        client closing), it gives the request up: see _abandon."""
        while True:
            try:
                r = await q.get()
            except asyncio.CancelledError:
                # Give the request up before the cancellation goes on: the
                # cancel (6) must reach the gateway and a grant that raced
                # in must be released, even if we are cancelled again.
                t = asyncio.ensure_future(self._abandon(wc, rid, q, k))
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(t)
                raise
            if r is DROPPED:
                return None
            if r is CLOSING:
                await self._abandon(wc, rid, q, k)
                raise ClosedError(f"{k.what()}: the client closed", k.req.get("key"))
            if r.get("type") == "queued":
                wc.good()
                continue
            wc.unregister(rid)
            return r

    async def _abandon(self, wc: Conn, rid: str, q: asyncio.Queue, k: _Call) -> None:
        """Give up the copy ``rid`` of ``k``. A waiting acquire is cancelled on
        the gateway (command 6) and its final answer awaited: a grant that
        raced with the cancel is released, so the caller never holds a lock
        it did not get. A try-acquire's answer is settled in the background
        for the same reason. Other requests are forgotten."""
        if not k.grantable:
            wc.unregister(rid)
            return

        async def settle() -> None:
            try:
                async with asyncio.timeout(self.request_timeout):
                    while True:
                        r = await q.get()
                        if r is DROPPED:
                            log.warning("lockgate: connection lost while giving up %s; a grant that raced in "
                                        "stays held until its TTL", k.what())
                            return
                        if r is CLOSING or r.get("type") == "queued":
                            continue
                        if r.get("type") == "grant":
                            await self._release_raced(r)
                        elif r.get("type") == "grants":
                            for g in r.get("leases") or []:
                                if isinstance(g, dict):
                                    await self._release_raced(g)
                        return
            except TimeoutError:
                log.warning("lockgate: no answer to a cancelled %s; closing the connection so that the "
                            "gateway drops the wait", k.what())
                wc.close_for("", False, ConnectionError("cancelled acquire never answered"))
            finally:
                wc.unregister(rid)

        if not k.wait:
            asyncio.ensure_future(settle())
            return
        try:
            await wc.send({"id": format(next(self._ids), "x"), "commandType": CMD_CANCEL, "target": rid})
        except Exception as e:
            log.warning("lockgate: could not send the cancel of %s: %r", k.what(), e)
        await settle()

    async def _release_raced(self, r: Dict[str, Any]) -> None:
        key = r.get("key")
        tok = parse_token(r.get("fencingToken"))
        log.debug("lockgate: releasing a grant of %r (token %s) that raced with giving up", key, tok)
        k = _Call("release", {"commandType": CMD_RELEASE, "key": key, "lockToken": r.get("lockToken"),
                              "fencingToken": {"key": key, "value": tok}, "ack": True})
        try:
            async with asyncio.timeout(self.request_timeout):
                a = await self._do(k)
            if a.get("type") == "error" and (a.get("error") or {}).get("code") != "not_held":
                raise error_from_reply(a.get("error"), key)
        except Exception as e:
            log.warning("lockgate: could not release a grant of %r that raced with giving up; it stays held "
                        "until its TTL: %r", key, e)

    async def _timed(self, k: _Call, timeout: Optional[float] = None) -> Dict[str, Any]:
        """_do bounded by ``timeout`` (default request_timeout): running out
        is an UnavailableError naming the last failure."""
        t = self.request_timeout if timeout is None else timeout
        try:
            async with asyncio.timeout(t):
                return await self._do(k)
        except TimeoutError:
            last = k.last_error or self._dial_error
            if isinstance(last, (NotLeaderError, UnauthorizedError)):
                raise last from None
            raise UnavailableError("unavailable", f"{k.what()}: no answer within {t:g} s"
                                   + (f" (last failure: {last})" if last else ""), k.req.get("key")) from None

    # -- operations --------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lock(self, key: str, ttl: Optional[float] = None, value: Optional[str] = None,
                   auto_renew: Optional[bool] = None, wait: Optional[float] = None, *, mode: Optional[str] = None,
                   permits: Optional[int] = None, lock_delay: Optional[float] = None,
                   session: "Union[Session, bool, None]" = None) -> AsyncIterator[Lease]:
        """``async with client.lock(key) as lease:`` — acquire (waiting), run
        the block, release. Act only while ``lease.held``; ``lease.lost`` is
        set if the lease ends early."""
        lease = await self.acquire(key, ttl=ttl, value=value, auto_renew=auto_renew, wait=wait, mode=mode,
                                   permits=permits, lock_delay=lock_delay, session=session)
        try:
            yield lease
        finally:
            await self._release_on_exit(lease)

    async def _release_on_exit(self, lease: Lease) -> None:
        if lease.lost.is_set():
            return  # released, or lost: the block had lease.lost to tell it
        try:
            await self.release(lease)
        except NotHeldError:
            pass

    async def acquire(self, key: str, ttl: Optional[float] = None, value: Optional[str] = None,
                      auto_renew: Optional[bool] = None, wait: Optional[float] = None,
                      lock_token: Optional[str] = None, *, mode: Optional[str] = None,
                      permits: Optional[int] = None, lock_delay: Optional[float] = None,
                      session: "Union[Session, bool, None]" = None) -> Lease:
        """Wait until ``key`` is granted, across reconnects and leader changes.

        ``ttl`` in seconds (None: 20 s, renewed automatically); ``auto_renew``
        renews at ttl/3 (default: only for the default TTL); ``wait`` bounds
        the wait in seconds (sent as waitMs; running out raises
        LockTimeoutError). Cancelling the awaiting task cancels the wait on the
        gateway and releases a grant that raced in.

        ``mode="shared"`` takes a read lock (held beside other shared
        holders, never beside an exclusive one; the gateway's ``shared``
        feature); ``permits=N`` one of N semaphore permits (``semaphore``;
        PermitsMismatchError when the key's holders hold another N);
        ``lock_delay`` (seconds, ≤ 60) keeps the key from anyone for that
        long after this lease expires (``lockdelay``). A feature the gateway
        did not announce raises UnsupportedError before anything is sent.

        ``session``: a :class:`Session` puts the lease in it (the gateway's
        ``sessions``): it takes the session's TTL (leave ``ttl`` None or
        equal), is renewed by the session's keep-alive and ends with it; an
        acquire in a session that is gone raises SessionExpiredError.
        ``False``: in no session (the lease renews itself). None (default):
        the client's own session for a lease without ``ttl`` (see
        ``Client(sessions=…)``)."""
        return await self._acquire(key, ttl, value, auto_renew, wait, lock_token, True,
                                   validate_primitives(mode, permits, lock_delay), session)

    async def try_acquire(self, key: str, ttl: Optional[float] = None, value: Optional[str] = None,
                          auto_renew: Optional[bool] = None, lock_token: Optional[str] = None, *,
                          mode: Optional[str] = None, permits: Optional[int] = None,
                          lock_delay: Optional[float] = None, session: "Union[Session, bool, None]" = None) -> Lease:
        """One attempt: a held key raises HeldError naming the holder (a key
        in its lock-delay: DelayedError with ``retry_in``). ``session`` as
        :meth:`acquire`'s."""
        return await self._acquire(key, ttl, value, auto_renew, None, lock_token, False,
                                   validate_primitives(mode, permits, lock_delay), session)

    @staticmethod
    def _primitive_fields(req: Dict[str, Any], prim: "tuple[str, int, int, List[str]]") -> None:
        mode, permits, delay, _ = prim
        if mode == "shared":
            req["mode"] = "shared"
        if permits > 0:
            req["permits"] = permits
        if delay > 0:
            req["lockDelayMs"] = delay

    async def _acquire(self, key: str, ttl: Optional[float], value: Optional[str], auto_renew: Optional[bool],
                       wait: Optional[float], handle: Optional[str], waiting: bool,
                       prim: "tuple[str, int, int, List[str]]", session: "Union[Session, bool, None]" = None) -> Lease:
        validate_key(key)
        ttl = validate_ttl(ttl)
        validate_value(value)
        needs = prim[3]
        # Only plain exclusive leases are cached (as the Go SDK), and not
        # those of a session the caller names.
        plain = not needs and session is None
        explicit_ttl = ttl
        ttl, auto_renew = _acquire_defaults(ttl, auto_renew, wait)
        with self._enter():
            opts = (float(ttl), value, bool(auto_renew))
            if self._cache is not None and plain:
                hit, stale = self._cache.take(key, opts, handle)
                if hit is not None:
                    return hit
                if stale is not None:
                    await self._release_quietly(stale)  # or this acquire would wait behind it
            elif self._cache is not None:
                for stale in self._cache.evict([key]):
                    await self._release_quietly(stale)
            user_handle = handle
            wait_until = time.monotonic() + wait if wait is not None else None
            gone = 0
            while True:
                chosen = await self._session_for(session, explicit_ttl, auto_renew)
                s = chosen if isinstance(chosen, Session) else None
                lttl = self._outside_ttl(ttl) if chosen is OUTSIDE else ttl
                h = handle or new_handle()
                req: Dict[str, Any] = {"commandType": CMD_ACQUIRE if waiting else CMD_TRY_ACQUIRE, "key": key,
                                       "clientId": self.client_id, "ttl": ms(lttl), "lockToken": h}
                if value is not None:
                    req["value"] = value
                self._primitive_fields(req, prim)
                self._session_fields(req, s)
                k = _Call("acquire" if waiting else "try-acquire", req, wait=waiting, grantable=True,
                          needs=needs + (["sessions"] if s is not None else []))
                r = await self._send_acquire(k, waiting, wait, wait_until, key)
                if self._session_gone(r, s, session, key, gone):
                    gone += 1
                    continue
                if r.get("type") != "grant":
                    raise self._unexpected(r, key, "grant")
                lease = await self._lease(r, key, lttl, value, auto_renew, k.first, s)
                if lease is None:
                    if waiting and user_handle is None:
                        log.info("lockgate: grant of %r expired on arrival; queueing again", key)
                        continue
                    raise NotHeldError("the grant expired before it could be renewed", key)
                if self._cache is not None and plain:
                    self._cache.hold(lease, opts)
                return lease

    async def _send_acquire(self, k: "_Call", waiting: bool, wait: Optional[float], wait_until: Optional[float],
                            key: str) -> Dict[str, Any]:
        """Send an acquire or acquire-all call and return its answer. A
        bounded wait (``wait`` seconds, ending at ``wait_until``) asks the
        gateway for what is left of it on every send, and is bounded here
        too; a try is bounded by the request timeout."""
        if wait_until is not None:
            def on_send(now: float, req: Dict[str, Any] = k.req) -> None:
                # A re-sent copy asks only for what is left of the wait,
                # rounded up: rounded down (as TTLs are), the gateway's
                # timeout came up to 1 ms before the caller's wait ended.
                req["waitMs"] = max(1, math.ceil((wait_until - now) * 1000.0 - 1e-9))
            k.on_send = on_send
        if not waiting:
            return await self._timed(k)
        if wait_until is None:
            return await self._do(k)
        assert wait is not None
        # The gateway answers timeout at waitMs; our own bound, a little
        # later, holds if it does not (an older server).
        try:
            async with asyncio.timeout(max(0.0, wait_until - time.monotonic()) + min(1.0, self.request_timeout)):
                return await self._do(k)
        except TimeoutError:
            raise LockTimeoutError(f"not granted within {wait:g} s", key) from None

    async def acquire_all(self, keys: Sequence[str], ttl: Optional[float] = None, value: Optional[str] = None,
                          auto_renew: Optional[bool] = None, wait: Optional[float] = None, *,
                          mode: Optional[str] = None, permits: Optional[int] = None,
                          lock_delay: Optional[float] = None, session: "Union[Session, bool, None]" = None) -> List[Lease]:
        """Wait until every key of ``keys`` is granted at once (all or
        nothing; the gateway's ``multikey`` feature) and return one lease
        per key, in the order of ``keys``. Options, ``wait`` and
        cancellation as :meth:`acquire`'s. The leases are never kept by the
        lease cache."""
        return await self._acquire_all(keys, ttl, value, auto_renew, wait, True,
                                       validate_primitives(mode, permits, lock_delay), session)

    async def try_acquire_all(self, keys: Sequence[str], ttl: Optional[float] = None, value: Optional[str] = None,
                              auto_renew: Optional[bool] = None, *, mode: Optional[str] = None,
                              permits: Optional[int] = None, lock_delay: Optional[float] = None,
                              session: "Union[Session, bool, None]" = None) -> List[Lease]:
        """One attempt at every key: a held key raises HeldError and nothing is held."""
        return await self._acquire_all(keys, ttl, value, auto_renew, None, False,
                                       validate_primitives(mode, permits, lock_delay), session)

    async def _acquire_all(self, keys: Sequence[str], ttl: Optional[float], value: Optional[str],
                           auto_renew: Optional[bool], wait: Optional[float], waiting: bool,
                           prim: "tuple[str, int, int, List[str]]",
                           session: "Union[Session, bool, None]" = None) -> List[Lease]:
        keys = validate_keys(keys)
        ttl = validate_ttl(ttl)
        validate_value(value)
        explicit_ttl = ttl
        ttl, auto_renew = _acquire_defaults(ttl, auto_renew, wait)
        with self._enter():
            if self._cache is not None:
                for stale in self._cache.evict(keys):
                    await self._release_quietly(stale)
            wait_until = time.monotonic() + wait if wait is not None else None
            gone = 0
            while True:
                chosen = await self._session_for(session, explicit_ttl, auto_renew)
                s = chosen if isinstance(chosen, Session) else None
                lttl = self._outside_ttl(ttl) if chosen is OUTSIDE else ttl
                req: Dict[str, Any] = {"commandType": CMD_ACQUIRE_ALL if waiting else CMD_TRY_ACQUIRE_ALL,
                                       "keys": keys, "clientId": self.client_id, "ttl": ms(lttl),
                                       "lockToken": new_handle()}
                if value is not None:
                    req["value"] = value
                self._primitive_fields(req, prim)
                self._session_fields(req, s)
                k = _Call("acquire-all" if waiting else "try-acquire-all", req, wait=waiting, grantable=True,
                          needs=["multikey"] + prim[3] + (["sessions"] if s is not None else []))
                r = await self._send_acquire(k, waiting, wait, wait_until, keys[0])
                if self._session_gone(r, s, session, keys[0], gone):
                    gone += 1
                    continue
                if r.get("type") != "grants":
                    raise self._unexpected(r, keys[0], "grants")
                got = r.get("leases") if isinstance(r.get("leases"), list) else []
                leases: List[Lease] = []
                lost: Optional[LockgateError] = None
                expired = False
                if len(got) != len(keys):
                    lost = UnavailableError("unavailable", f"{len(got)} leases for {len(keys)} keys", keys[0])
                for i, g in enumerate(got if lost is None else []):
                    if not isinstance(g, dict) or g.get("key") != keys[i]:
                        lost = UnavailableError("unavailable", f"lease {i} is not for {keys[i]!r}", keys[0])
                        break
                    lease = await self._lease(dict(g, type="grant"), keys[i], lttl, value, auto_renew, k.first, s)
                    if lease is None:
                        expired = True
                        lost = NotHeldError("the grant expired before it could be renewed", keys[i])
                        break
                    leases.append(lease)
                if lost is None:
                    return leases
                # All or nothing: give back what this grant gave.
                for lease in leases:
                    with contextlib.suppress(LockgateError):
                        await self._release(lease)
                for g in got[len(leases) + (1 if expired else 0):]:
                    if isinstance(g, dict):
                        await self._release_raced(g)
                if not (expired and waiting):
                    raise lost
                log.info("lockgate: a grant of %r expired on arrival; queueing again", keys)

    async def _lease(self, r: Dict[str, Any], key: str, ttl: float, value: Optional[str], auto_renew: bool,
                     sent: float, session: Optional[Session] = None) -> Optional[Lease]:
        """A Lease from a grant; None if it arrived too late and its
        immediate renewal was refused, or its session ended meanwhile."""
        tok = parse_token(r.get("fencingToken"))
        handle = r.get("lockToken")
        if tok is None or not isinstance(handle, str) or not handle:
            raise UnavailableError("unavailable", "grant without lockToken or fencingToken", key)
        # A grant in the session lives as long as the session: its deadline
        # is the session's. One that does not name the session (a gateway
        # that ignored sessionId) is an ordinary lease.
        in_session = session if session is not None and r.get("sessionId") == session.id else None
        if session is not None and in_session is None:
            log.warning("lockgate: the grant of %r names no session; it renews itself", key)
        if in_session is not None:
            if not in_session.alive:
                return None  # the session ended while the acquire waited
            auto_renew = False
        got = r.get("ttl")
        if isinstance(got, (int, float)) and 0 < got / 1000.0 < ttl:
            ttl = got / 1000.0
        if in_session is None and sent + ttl - time.monotonic() < ttl / 2:
            # A long wait: renew at once, and count the deadline from the
            # renewal. Not under the caller's cancellation: the grant is
            # ours now and must not be left behind.
            t = asyncio.ensure_future(self._renew_raw(key, handle, tok, ttl))
            try:
                rsent, rttl, held = await asyncio.shield(t)
            except asyncio.CancelledError:
                t.add_done_callback(lambda _t: asyncio.ensure_future(self._release_raced(r)))
                raise
            except LockgateError as e:
                log.warning("lockgate: renewing a late grant of %r failed; its deadline stays short: %s", key, e)
            else:
                if not held:
                    return None
                sent, ttl = rsent, rttl
        permits = r.get("permits")
        lease = Lease(self, key, str(r.get("owner") or self.client_id), tok, handle, ttl, sent, value,
                      mode="shared" if r.get("mode") == "shared" else "exclusive",
                      permits=permits if isinstance(permits, int) and not isinstance(permits, bool) else 0,
                      session=in_session)
        if r.get("wanted"):
            lease._mark_wanted()
        self._track(lease)
        if auto_renew:
            lease._keepalive = asyncio.ensure_future(self._keep_alive(lease))
        return lease

    async def _release_quietly(self, lease: Lease) -> None:
        """Release a lease the cache gave up, for real; a failure is logged
        (the lease then ends at its TTL)."""
        try:
            await self._release(lease)
        except Exception as e:
            log.info("lockgate: releasing a cached lease of %r (token %d) failed; it ends at its TTL: %r",
                     lease.key, lease.fencing_token, e)

    async def _cache_renew(self, lease: Lease) -> None:
        """The lease cache's renewal of an unused lease the application did
        not ask to auto-renew. not_held ends it (and drop removes it); other
        failures leave it to its deadline or the next renewal."""
        left = lease.deadline - time.monotonic()
        if left <= 0 or lease.lost.is_set():
            return
        try:
            with self._enter():
                await self._renew_once(lease, lease.ttl, timeout=left)
        except LockgateError as e:
            log.debug("lockgate: renewing a cached lease of %r failed: %s", lease.key, e)

    def cache_stats(self) -> CacheStats:
        """What the lease cache did; all zero when it is off."""
        return self._cache.stats() if self._cache is not None else CacheStats()

    async def renew(self, lease: Lease, ttl: Optional[float] = None) -> None:
        """Extend ``lease`` to ``ttl`` seconds from now (default: its TTL).
        NotHeldError (and the lease ends, ``lost_reason`` "not_held") if the
        gateway no longer holds it. A session lease renews its session (every
        lease in it), whose TTL it keeps."""
        ttl = validate_ttl(ttl)
        if lease.lost.is_set():
            raise NotHeldError(f"the lease ended ({lease.lost_reason})", lease.key)
        if lease.session is not None:
            # A session lease lives as long as its session: renew that.
            if ttl is not None and ms(ttl) != ms(lease.session.ttl):
                raise ValidationError("invalid_ttl", f"a lease in a session keeps the session's TTL "
                                      f"({lease.session.ttl:g} s)", lease.key)
            await self.renew_session(lease.session)
            return
        with self._enter():
            await self._renew_once(lease, ttl if ttl is not None else lease.ttl)

    async def _renew_raw(self, key: str, handle: str, token: int, ttl: float,
                         timeout: Optional[float] = None) -> "tuple[float, float, bool]":
        """Renew (key, handle, token) to ``ttl``: the send time of the
        answered copy, the TTL granted, and whether the lease was held."""
        k = _Call("renew", {"commandType": CMD_RENEW, "key": key, "lockToken": handle,
                            "fencingToken": {"key": key, "value": token}, "ttl": ms(ttl)})
        r = await self._timed(k, timeout)
        if r.get("type") == "renewed":
            got = r.get("ttl")
            if isinstance(got, (int, float)) and 0 < got / 1000.0 < ttl:
                ttl = got / 1000.0
            return k.last, ttl, True
        if r.get("type") == "error" and (r.get("error") or {}).get("code") == "not_held":
            return k.last, ttl, False
        raise self._unexpected(r, key, "renewed")

    async def _renew_once(self, lease: Lease, ttl: float, timeout: Optional[float] = None) -> None:
        sent, ttl, held = await self._renew_raw(lease.key, lease.lock_token, lease.fencing_token, ttl, timeout)
        if not held:
            lease._end("not_held")
            raise NotHeldError("the gateway no longer holds the lease", lease.key)
        if not lease._extend(sent, ttl):
            raise NotHeldError(f"the lease ended ({lease.lost_reason})", lease.key)
        self._track(lease)

    async def _keep_alive(self, lease: Lease) -> None:
        """Renew every ttl/3 until the lease ends. not_held ends it at once;
        transient failures are retried with jittered backoff while the
        deadline allows; past it the lease's timer ends it as expired."""
        try:
            while not lease.lost.is_set() and not self._closed:
                await asyncio.sleep(lease.ttl / 3)
                attempt = 0
                while not lease.lost.is_set() and not self._closed:
                    left = lease.deadline - time.monotonic()
                    if left <= 0:
                        return
                    try:
                        await self._renew_once(lease, lease.ttl, timeout=left)
                        break
                    except NotHeldError:
                        return
                    except ClosedError:
                        return
                    except LockgateError as e:
                        attempt += 1
                        log.info("lockgate: renewing %r failed (attempt %d): %s", lease.key, attempt, e)
                        await asyncio.sleep(backoff(attempt, cap=max(0.01, lease.ttl / 10)))
        except asyncio.CancelledError:
            pass

    async def release(self, lease: Lease) -> None:
        """Release ``lease``; it ends with ``lost_reason`` "released".
        NotHeldError if the gateway no longer held it (it expired or went to
        someone else; the lease ends as "not_held").

        With ``cache_leases`` a lease nobody else wants is kept instead: it
        stays held and renewed, unused, and does not end (``lost`` stays
        clear) until the cache releases it for real; releasing it again
        raises NotHeldError."""
        if self._cache is not None and self._cache.put(lease, self.signals_wanted):
            return
        await self._release(lease)

    async def _release(self, lease: Lease) -> None:
        """Release ``lease`` on the gateway."""
        with self._enter():
            alive = [False]  # the lease was alive by our clock when the answered copy went out
            k = _Call("release", {"commandType": CMD_RELEASE, "key": lease.key, "lockToken": lease.lock_token,
                                  "fencingToken": {"key": lease.key, "value": lease.fencing_token}, "ack": True})

            def on_send(now: float) -> None:
                alive[0] = not lease.lost.is_set() and now < lease.deadline
            k.on_send = on_send
            r = await self._timed(k)
            if r.get("type") == "released":
                lease._end("released")
                return
            if r.get("type") == "error" and (r.get("error") or {}).get("code") == "not_held":
                if k.prior and alive[0]:
                    # An earlier copy may have reached the gateway before its
                    # connection failed, and nothing else can have ended a
                    # lease alive by our clock: that copy freed it.
                    lease._end("released")
                    return
                lease._end("not_held")
                if k.prior:
                    raise UnavailableError("unavailable", "release: outcome unknown: the re-sent copy was answered "
                                           "not_held after the lease's deadline, so an earlier copy may have freed it "
                                           "or it may have expired first", lease.key)
            raise self._unexpected(r, lease.key, "released")

    # -- sessions ----------------------------------------------------------------

    @property
    def session(self) -> Optional[Session]:
        """The client's own session (``Client(sessions=True)``) while it lives, else None."""
        return self._own

    async def open_session(self, ttl: Optional[float] = None, client_id: Optional[str] = None, *,
                           keep_alive: bool = True) -> Session:
        """Open a session (the gateway's ``sessions``): leases acquired with
        ``session=s`` live as long as it does, all renewed by one keep-alive
        every ttl/3 (unless ``keep_alive`` is False). ``ttl`` in seconds
        (default: the client's ``session_ttl``, else the server's, 20 s);
        ``client_id`` the owner of its leases (default: the client's).
        Bounded by ``request_timeout``."""
        ttl = validate_ttl(ttl)
        if ttl is None:
            ttl = self._session_ttl
        owner = client_id or self.client_id
        with self._enter():
            req: Dict[str, Any] = {"commandType": CMD_OPEN_SESSION, "clientId": owner}
            if ttl is not None:
                req["ttl"] = ms(ttl)
            k = _Call("open-session", req, needs=["sessions"])
            r = await self._timed(k)
            if r.get("type") != "session":
                raise self._unexpected(r, None, "session")  # type: ignore[arg-type]
            sid, got = r.get("sessionId"), r.get("ttl")
            if not isinstance(sid, str) or not sid or not isinstance(got, (int, float)) or got <= 0:
                raise UnavailableError("unavailable", "open-session: a session reply without sessionId or ttl")
            # The TTL started on the server after the first copy went out;
            # never count on more than was asked for.
            sttl = got / 1000.0 if ttl is None else min(ttl, got / 1000.0)
            s = Session(self, sid, owner, sttl, k.first)
            self._sessions[s] = None
            if keep_alive and not self._closed:
                s._keepalive = asyncio.ensure_future(self._keep_session_alive(s))
            return s

    async def renew_session(self, session: Session) -> None:
        """One keep-alive of ``session``: it and every lease in it live its
        TTL from this request. SessionExpiredError (and the session ends, its
        leases ``lost_reason`` "not_held") if the server no longer has it."""
        if session.ended.is_set():
            raise SessionExpiredError(f"renew-session: the session ended ({session.end_reason})")
        with self._enter():
            await self._renew_session(session)

    async def _renew_session(self, s: Session, timeout: Optional[float] = None) -> None:
        # ttl: a gateway that has not seen the session (a new leader's) takes it as the session's.
        k = _Call("renew-session", {"commandType": CMD_RENEW_SESSION, "sessionId": s.id, "ttl": ms(s.ttl)})
        r = await self._timed(k, timeout)
        if r.get("type") == "sessionRenewed":
            s._extend(k.last)
            return
        code = (r.get("error") or {}).get("code") if r.get("type") == "error" else None
        if code in ("session_expired", "not_held"):
            s._end("not_held")
            raise SessionExpiredError(f"renew-session: {code}: {(r.get('error') or {}).get('message', '')}")
        raise self._unexpected(r, None, "sessionRenewed")  # type: ignore[arg-type]

    async def close_session(self, session: Session) -> None:
        """Close ``session`` on the server: every lease in it is released
        (``lost_reason`` "released"). A session already gone raises
        SessionExpiredError, and ends here all the same. A re-sent close
        answered session_expired counts as closed when the session was alive
        by our clock as the answered copy went out (as a re-sent release)."""
        with self._enter():
            alive = [False]
            k = _Call("close-session", {"commandType": CMD_CLOSE_SESSION, "sessionId": session.id})

            def on_send(now: float) -> None:
                alive[0] = not session.ended.is_set() and now < session.deadline
            k.on_send = on_send
            r = await self._timed(k)
            if r.get("type") == "sessionClosed":
                session._end("released")
                return
            if r.get("type") == "error" and (r.get("error") or {}).get("code") == "session_expired":
                if k.prior and alive[0]:
                    session._end("released")
                    return
                session._end("not_held")
                raise SessionExpiredError(f"close-session: {(r.get('error') or {}).get('message', '')}")
            raise self._unexpected(r, None, "sessionClosed")  # type: ignore[arg-type]

    async def _keep_session_alive(self, s: Session) -> None:
        """Renew ``s`` every ttl/3 until it ends. A refusal ends it (and its
        leases) at once; transient failures are retried with jittered
        backoff (up to ttl/10) while its deadline allows; past it the
        session's timer ends it as expired."""
        try:
            while not s.ended.is_set() and not self._closed:
                await asyncio.sleep(max(0.0, s.sent + s.ttl / 3 - time.monotonic()))
                attempt = 0
                while not s.ended.is_set() and not self._closed:
                    left = s.deadline - time.monotonic()
                    if left <= 0:
                        return
                    try:
                        await self._renew_session(s, timeout=left)
                        break
                    except (SessionExpiredError, ClosedError):
                        return
                    except LockgateError as e:
                        attempt += 1
                        log.info("lockgate: renewing a session failed (attempt %d): %s", attempt, e)
                        await asyncio.sleep(backoff(attempt, cap=max(0.01, s.ttl / 10)))
        except asyncio.CancelledError:
            pass

    def _forget_session(self, s: Session) -> None:
        self._sessions.pop(s, None)
        if self._own is s:
            self._own = None

    async def _session_for(self, session: "Union[Session, bool, None]", ttl: Optional[float],
                           auto_renew: bool) -> "Union[Session, _Outside, None]":
        """The session an acquire's lease goes into: the caller's (checked),
        none (False, an explicit ttl, no auto-renewal, sessions off, a gateway
        without them), or the client's own, opened on first use; OUTSIDE
        when the lease would have gone into the client's own session but
        cannot (the gateway refused it, now or less than ``session_retry``
        ago, or opening it failed)."""
        if session is False:
            return None
        if isinstance(session, Session):
            if ttl is not None and ms(ttl) != ms(session.ttl):
                raise ValidationError("invalid_ttl", f"a lease in a session takes the session's TTL "
                                      f"({session.ttl:g} s): leave ttl None")
            if session.ended.is_set():
                raise SessionExpiredError(f"acquire in a session that ended ({session.end_reason})")
            return session
        if session is not None and session is not True:
            raise ValidationError("bad_json", f"session must be a Session, False or None, not {session!r}")
        if not self._use_sessions or ttl is not None or not auto_renew:
            return None
        own = self._own
        if own is not None and own.alive:
            return own
        wc = self._cur
        if wc is not None and not wc.closed and (wc is self._no_sessions_on or "sessions" not in wc.features):
            return None
        st = self._session_stats
        if st.falling_back and time.monotonic() < self._own_retry_at:
            st.fallbacks += 1
            return OUTSIDE
        if self._own_opening is None:
            fut = asyncio.ensure_future(self._open_own())
            self._own_opening = fut

            def done(_f: "asyncio.Future[Optional[Session]]") -> None:
                if self._own_opening is fut:
                    self._own_opening = None
            fut.add_done_callback(done)
        got = await asyncio.shield(self._own_opening)
        if got is OUTSIDE and st.falling_back:
            st.fallbacks += 1
        return got

    def _outside_ttl(self, ttl: float) -> float:
        """The TTL of a lease that would have gone into the client's session
        and renews itself: the session's when ``session_ttl`` sets one."""
        return self._session_ttl if self._session_ttl is not None else ttl

    async def _open_own(self) -> "Union[Session, _Outside, None]":
        """Open the client's own session. A gateway without sessions is
        remembered for its connection (None: the lease renews itself, as
        everywhere on that gateway). A refusal — quota_exceeded,
        too_many_sessions — starts a fallback period: acquires go without
        the session (OUTSIDE) and ask again after ``session_retry``; it is
        warned of once per period and counted. forbidden and unauthorized
        fail the acquire; any other failure but the client's close leaves it
        to a lease that renews itself (OUTSIDE)."""
        st = self._session_stats
        try:
            s = await self.open_session()
        except ClosedError:
            raise
        except UnsupportedError:
            self._no_sessions_on = self._cur
            return None
        except LockgateError as e:
            if e.code == "unknown_command":
                self._no_sessions_on = self._cur
                return None
            if e.code in ("forbidden", "unauthorized"):
                raise
            if e.code in ("quota_exceeded", "too_many_sessions"):
                st.refused += 1
                self._own_retry_at = time.monotonic() + self._session_retry
                if not st.falling_back:
                    st.falling_back = True
                    log.warning("lockgate: the gateway refused the client's session (%s); auto-renewed leases renew "
                                "themselves one by one until it opens (asked again after %g s)", e, self._session_retry)
                else:
                    log.info("lockgate: the gateway refused the client's session again: %s", e)
                return OUTSIDE
            log.warning("lockgate: opening the client's session failed; the lease renews itself: %s", e)
            return OUTSIDE
        if self._closed:
            return None
        self._own = s
        st.opened += 1
        if st.falling_back:
            log.info("lockgate: the client's session opened after refusals; auto-renewed leases go into it again")
        st.falling_back = False
        return s

    @staticmethod
    def _session_fields(req: Dict[str, Any], s: Optional[Session]) -> None:
        """Put an acquire's lease in ``s``: its id, and no ttl (the lease takes the session's)."""
        if s is not None:
            req["sessionId"] = s.id
            req.pop("ttl", None)

    def _session_gone(self, r: Dict[str, Any], s: Optional[Session], asked: "Union[Session, bool, None]",
                      key: str, before: int) -> bool:
        """An acquire answered session_expired: the session ends here too
        (its leases "not_held"); the client's own is replaced and the
        acquire tried again, once (True); a caller's session raises."""
        if s is None or r.get("type") != "error" or (r.get("error") or {}).get("code") != "session_expired":
            return False
        s._end("not_held")
        if isinstance(asked, Session) or before > 0:
            raise error_from_reply(r.get("error"), key)
        log.info("lockgate: the client's session is gone on the server; acquiring %r again in a new one", key)
        return True

    async def inspect(self, key: str) -> LockInfo:
        """Who holds ``key``; NotFoundError if nobody does."""
        validate_key(key)
        with self._enter():
            r = await self._timed(_Call("inspect", {"commandType": CMD_INSPECT, "key": key}))
            if r.get("type") != "info":
                raise self._unexpected(r, key, "info")
            exp = r.get("expiresIn")
            w = r.get("waiters")
            p = r.get("permits")
            holders = []
            for h in r.get("holders") or []:
                if isinstance(h, dict):
                    he = h.get("expiresIn")
                    holders.append(HolderInfo(owner=str(h.get("owner") or ""), fencing_token=parse_token(h.get("fencingToken")),
                                              value=h.get("value"),
                                              expires_in=he / 1000.0 if isinstance(he, (int, float)) else None))
            return LockInfo(key=key, owner=str(r.get("owner") or ""), fencing_token=parse_token(r.get("fencingToken")),
                            value=r.get("value"), expires_in=exp / 1000.0 if isinstance(exp, (int, float)) else None,
                            waiters=w if isinstance(w, int) else -1,
                            mode="shared" if r.get("mode") == "shared" else "exclusive",
                            permits=p if isinstance(p, int) and not isinstance(p, bool) else 0, holders=holders)

    @staticmethod
    def _unexpected(r: Dict[str, Any], key: str, want: str) -> LockgateError:
        if r.get("type") == "error":
            return error_from_reply(r.get("error"), key)
        return LockgateError("internal", f"answered {r.get('type')!r} where {want!r} was expected", key)
