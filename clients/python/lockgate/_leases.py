"""Leases: acquire, renew, release and inspect, the lease-cache hooks,
and the live leases the gateway's ``wanted`` pushes are matched against.

Deadlines: a lease's deadline is ``sent + ttl − (ttl/100 + 2 ms)`` on the
monotonic clock, where ``sent`` is when the first copy of its acquire (or
its latest successful renew) was sent. A grant that arrives with less than
half its TTL left is renewed at once. A lease that renews itself does so
with the keep-alive timer of ``_keepalive``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import logging
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, List, Optional, Union

from ._cache import CacheStats
from ._calls import _Call
from ._keepalive import keep_alive
from ._sessions import OUTSIDE
from ._wire import (
    CMD_ACQUIRE, CMD_INSPECT, CMD_RELEASE, CMD_RENEW, CMD_TRY_ACQUIRE, DEFAULT_TTL, ms, new_handle, parse_token,
    validate_key, validate_primitives, validate_ttl, validate_value,
)
from .errors import (
    LockgateError, LockTimeoutError, NotHeldError, UnavailableError, ValidationError, error_from_reply,
)
from .lease import HolderInfo, Lease, LockInfo
from .session import Session

if TYPE_CHECKING:  # pragma: no cover
    from ._cache import LeaseCache

log = logging.getLogger("lockgate")

MAX_EARLY_WANTED = 1024


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


class _Leases:
    """The Client's leases (a part of Client, which holds its state)."""

    if TYPE_CHECKING:  # pragma: no cover
        client_id: str
        request_timeout: float
        signals_wanted: bool
        _closed: bool
        _cache: Optional[LeaseCache]
        _held: Dict["tuple[str, str]", Lease]
        _early_wanted: Dict["tuple[str, str]", None]

        def _enter(self) -> Any: ...
        async def _do(self, k: _Call) -> Dict[str, Any]: ...
        async def _timed(self, k: _Call, timeout: Optional[float] = None) -> Dict[str, Any]: ...
        async def _release_raced(self, r: Dict[str, Any]) -> None: ...
        @staticmethod
        def _unexpected(r: Dict[str, Any], key: str, want: str) -> LockgateError: ...
        @staticmethod
        def _primitive_fields(req: Dict[str, Any], prim: "tuple[str, int, int, List[str]]") -> None: ...
        async def _session_for(self, session: "Union[Session, bool, None]", ttl: Optional[float],
                               auto_renew: bool) -> Any: ...
        def _outside_ttl(self, ttl: float) -> float: ...
        @staticmethod
        def _session_fields(req: Dict[str, Any], s: Optional[Session]) -> None: ...
        def _session_gone(self, r: Dict[str, Any], s: Optional[Session], asked: "Union[Session, bool, None]",
                          key: str, before: int) -> bool: ...
        async def renew_session(self, session: Session) -> None: ...

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
            lease._keepalive = self._keep_alive(lease)
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

    async def _renew_once(self, lease: Lease, ttl: float, timeout: Optional[float] = None) -> float:
        """Renew ``lease`` to ``ttl``: the send time of the answered copy.
        NotHeldError (and the lease ends) when the gateway no longer holds it."""
        sent, ttl, held = await self._renew_raw(lease.key, lease.lock_token, lease.fencing_token, ttl, timeout)
        if not held:
            lease._end("not_held")
            raise NotHeldError("the gateway no longer holds the lease", lease.key)
        if not lease._extend(sent, ttl):
            raise NotHeldError(f"the lease ended ({lease.lost_reason})", lease.key)
        self._track(lease)
        return sent

    def _keep_alive(self, lease: Lease) -> "asyncio.Task[None]":
        """Renew ``lease`` every ttl/3 until it ends (the keep-alive timer,
        as a session's): not_held ends it at once; transient failures are
        retried with jittered backoff while the deadline allows; past it the
        lease's timer ends it as expired."""
        async def renew(timeout: float) -> float:
            return await self._renew_once(lease, lease.ttl, timeout=timeout)
        return keep_alive(lease, lease.lost, renew, what=repr(lease.key), loss=(NotHeldError,),
                          closed=lambda: self._closed)

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
