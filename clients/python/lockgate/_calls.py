"""The request loop: one logical request (a ``_Call``) sent once per
connection attempt until it gets an answer that is not a transient failure.

Dropped connections, ``not_leader`` redirects, ``closed`` gateways and
``unavailable`` answers are retried (redirects at once, the rest with
backoff). A request given up — cancelled, timed out, the client closing —
is abandoned so that the caller never holds a lock it did not get: a waiting
acquire is cancelled on the gateway (command 6) and a grant that raced in is
released.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ._conn import CLOSING, DROPPED, Conn
from ._wire import CMD_CANCEL, CMD_RELEASE, backoff, parse_token
from .errors import (
    ClosedError, LockgateError, NotLeaderError, UnauthorizedError, UnavailableError, error_from_reply,
)

if TYPE_CHECKING:  # pragma: no cover
    import itertools

log = logging.getLogger("lockgate")


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


class _Calls:
    """The Client's request loop (a part of Client, which holds its state)."""

    if TYPE_CHECKING:  # pragma: no cover
        request_timeout: float
        max_hops: int
        _ids: itertools.count
        _closed: bool
        _calls: int
        _idle: Optional[asyncio.Event]
        _waits: set
        _dial_error: Optional[BaseException]

        def _start(self) -> None: ...
        async def _conn(self) -> Conn: ...
        def _is_dead(self, addr: str) -> bool: ...
        @staticmethod
        def _check_features(wc: Conn, needs: List[str], what: str) -> None: ...

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

    async def _do(self, k: _Call) -> Dict[str, Any]:
        """Send ``k`` until it gets an answer that is not a transient failure.
        Dropped connections, not_leader, closed and unavailable answers are
        retried (redirects at once, the rest with backoff); MAX_STRIKES
        unavailable answers, or not_leader answers naming no leader, in a row
        move the connection to another endpoint. The caller bounds it
        (asyncio.timeout, cancellation)."""
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
                else:
                    # This node knows no leader: an election, or a leader cut
                    # off from its quorum that stepped down, which may last.
                    # Nothing was done (k.prior stays); like unavailable, a
                    # few in a row move the client to another endpoint.
                    wc.strike()
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

    @staticmethod
    def _unexpected(r: Dict[str, Any], key: str, want: str) -> LockgateError:
        if r.get("type") == "error":
            return error_from_reply(r.get("error"), key)
        return LockgateError("internal", f"answered {r.get('type')!r} where {want!r} was expected", key)
