"""Watches (the gateway's command 9): a key's holders, ``synced``, then every
grant, release and expiry, as an async iterator on one connection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Optional, Set

from ._conn import CLOSING, DROPPED, Conn, WatchQueue
from ._wire import CMD_UNWATCH, CMD_WATCH, backoff, parse_token
from .errors import (
    LockgateError, NotLeaderError, UnavailableError, WatchOverflowError, error_from_reply,
)

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

__all__ = ["Watch", "WatchEvent", "WATCH_BUFFER", "EVENT_TYPES"]

log = logging.getLogger("lockgate")

#: How many events of one watch the client holds for a caller that does not
#: iterate; one more ends the watch with WatchOverflowError (the Go SDK's
#: client.WatchBuffer).
WATCH_BUFFER = 1024

#: The kinds of events: a current holder (before "synced"), "synced" (the
#: holders so far were every current one), then "granted", "released" and
#: "expired" (a lease ended at its TTL).
EVENT_TYPES = ("holder", "synced", "granted", "released", "expired")


@dataclass
class WatchEvent:
    """One change of a watched key."""

    type: str  #: one of EVENT_TYPES
    key: str
    owner: str
    fencing_token: Optional[int]  #: the holder's token (None on synced)
    value: Optional[str]
    mode: str  #: "exclusive" or "shared"
    permits: int  #: a semaphore's permits (0 otherwise)
    revision: int  #: the backend's revision of the change (0 where it has none)


def event_of(r: Dict[str, Any], key: str) -> Optional[WatchEvent]:
    """The WatchEvent an ``event`` message reports; None for anything else."""
    if r.get("type") != "event" or r.get("event") not in EVENT_TYPES:
        return None
    p, rev, v = r.get("permits"), r.get("revision"), r.get("value")
    return WatchEvent(type=r["event"], key=key, owner=str(r.get("owner") or ""),
                      fencing_token=parse_token(r.get("fencingToken")), value=v if isinstance(v, str) else None,
                      mode="shared" if r.get("mode") == "shared" else "exclusive",
                      permits=p if isinstance(p, int) and not isinstance(p, bool) else 0,
                      revision=rev if isinstance(rev, int) and not isinstance(rev, bool) else 0)


class Watch:
    """An open (or opening) watch of ``key``: ``async with client.watch(key)
    as w``, or ``w = await client.watch(key)``; then ``async for ev in w``.
    Iterate it once. ``aclose()`` ends it (unwatch on the gateway) and an
    iteration in progress ends quietly; so does closing the client."""

    def __init__(self, client: "Client", key: str) -> None:
        self._client = client
        self.key = key
        self._wc: Optional[Conn] = None
        self._rid = ""
        self._q: Optional[WatchQueue] = None
        self._first: Optional[Dict[str, Any]] = None
        self._started = False
        self._ended = False
        self._tasks: Set["asyncio.Task[Any]"] = set()

    def __await__(self):  # type: ignore[no-untyped-def]
        return self.start().__await__()

    async def __aenter__(self) -> "Watch":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> "Watch":
        return self

    async def __anext__(self) -> WatchEvent:
        ev = await self.next()
        if ev is None:
            raise StopAsyncIteration
        return ev

    async def start(self) -> "Watch":
        """Open the watch: once the gateway accepted it (its first event
        arrived). UnsupportedError on a gateway without watches; the
        retries of a request (redirects, backoff) bounded by the client's
        request_timeout (then UnavailableError)."""
        if self._started:
            return self
        c = self._client
        what = f"watch {self.key!r}"
        last: Optional[BaseException] = None
        hops = retry = 0
        with c._enter():
            try:
                async with asyncio.timeout(c.request_timeout):
                    while True:
                        wc = await c._conn()
                        c._check_features(wc, ["watch"], what)
                        rid = format(next(c._ids), "x")
                        q = WatchQueue(WATCH_BUFFER)
                        if wc.register(rid, q) is None:
                            await wc.done.wait()
                            continue
                        try:
                            await wc.send({"id": rid, "commandType": CMD_WATCH, "key": self.key})
                            r = await q.get()
                        except asyncio.CancelledError:
                            wc.unregister(rid)
                            self._unwatch(wc, rid)
                            raise
                        except Exception as e:
                            wc.unregister(rid)
                            last = e
                            continue
                        if r is DROPPED:
                            last = ConnectionError("connection to the gateway lost")
                            continue
                        if r.get("type") == "error":
                            wc.unregister(rid)
                            err = error_from_reply(r.get("error"), self.key)
                            last = err
                            if err.code == "not_leader":
                                addr = err.leader_addr if isinstance(err, NotLeaderError) else ""
                                if addr and addr != wc.addr and not c._is_dead(addr) and hops < c.max_hops:
                                    hops += 1
                                    wc.close_for(addr, False, err)
                                    continue
                                if not addr or c._is_dead(addr):
                                    wc.strike()  # no leader known here: as for unavailable, a few in a row move on
                            elif err.code == "closed":
                                wc.close_for("", True, err)
                                continue
                            elif err.code == "unavailable":
                                wc.strike()
                            else:
                                raise err
                            retry += 1
                            await asyncio.sleep(backoff(retry))
                            continue
                        wc.good()
                        self._wc, self._rid, self._q, self._first = wc, rid, q, r
                        q.on_overflow = lambda: self._unwatch(wc, rid)
                        self._started = True
                        return self
            except TimeoutError:
                if isinstance(last, LockgateError) and last.code not in ("unavailable", "closed"):
                    raise last from None
                raise UnavailableError("unavailable", f"{what}: not established within {c.request_timeout:g} s"
                                       + (f" (last failure: {last!r})" if last else ""), self.key) from None

    def _unwatch(self, wc: Conn, rid: str) -> None:
        """End the watch on the gateway, without waiting for the answer."""
        if wc.closed:
            return

        async def send() -> None:
            with contextlib.suppress(Exception):
                await wc.send({"id": format(next(self._client._ids), "x"), "commandType": CMD_UNWATCH, "target": rid})
        t = asyncio.ensure_future(send())
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def _end(self, unwatch: bool) -> None:
        if self._ended:
            return
        self._ended = True
        if self._wc is not None:
            self._wc.unregister(self._rid)
            if unwatch:
                self._unwatch(self._wc, self._rid)

    async def aclose(self) -> None:
        """End the watch (unwatch on the gateway). Idempotent."""
        if self._ended:
            return
        self._end(True)
        if self._q is not None:
            self._q.put_nowait(CLOSING)  # wakes an iteration waiting for the next event
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def next(self) -> Optional[WatchEvent]:
        """The next event; None once the watch was closed (by aclose or the
        client's close). Raises WatchOverflowError when the watch fell
        behind, UnavailableError when its connection was lost, and the
        gateway's error when it ended the watch."""
        if not self._started:
            await self.start()
        if self._ended:
            return None
        q = self._q
        assert q is not None
        if q.overflowed:
            self._end(True)
            raise WatchOverflowError(f"the caller did not take {WATCH_BUFFER} events in time (watch again)", self.key)
        if self._first is not None:
            r: Any = self._first
            self._first = None
        else:
            r = await q.get()
        if self._ended or r is CLOSING:
            return None
        if r is DROPPED:
            self._end(False)
            if self._client._closed or self._client._closing:
                return None
            raise UnavailableError("unavailable", "the watch's connection was lost (watch again)", self.key)
        if r.get("type") == "error" or r.get("event") == "error":
            self._end(False)
            raise error_from_reply(r.get("error"), self.key)
        ev = event_of(r, self.key)
        if ev is None:
            self._end(True)
            raise UnavailableError("unavailable", f"the gateway sent {r.get('type')!r}/{r.get('event')!r}", self.key)
        return ev


