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
import contextlib
import itertools
import logging
import ssl as _ssl
from typing import Dict, List, Optional, Sequence, Union

from ._cache import DEFAULT_CACHE_IDLE, DEFAULT_MAX_CACHED_LEASES, LeaseCache
from ._calls import _Calls
from ._conn import CLOSING, Conn
from ._connection import _Connection
from ._leases import _Leases
from ._primitives import _Primitives
from ._sessions import DEFAULT_SESSION_RETRY, _Sessions
from ._wire import new_handle, validate_key, validate_ttl, ws_url
from .lease import Lease
from .session import Session, SessionStats
from .watch import Watch

__all__ = ["Client"]

log = logging.getLogger("lockgate")

DEFAULT_REQUEST_TIMEOUT = 10.0
DEFAULT_DIAL_TIMEOUT = 5.0
DEFAULT_MAX_HOPS = 5


class Client(_Connection, _Calls, _Leases, _Primitives, _Sessions):
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

    async def __aenter__(self) -> "Client":
        self._start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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
