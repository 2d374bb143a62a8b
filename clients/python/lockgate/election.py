"""Leader election over the lock service (the Go SDK's lock/election): a
leader is the exclusive holder of the election's key, and its fencing token
names its term.

    lead = await election.campaign(client, "svc/leader", "10.0.0.7:8080", ttl=5)
    # lead while lead.held; send lead.fencing_token with every write
    await lead.resign()

    async with contextlib.aclosing(election.observe(client, "svc/leader")) as leaders:
        async for leader in leaders: ...
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, AsyncIterator, Optional

from ._wire import DEFAULT_TTL
from .errors import LockgateError, NotFoundError
from .lease import Lease
from .watch import Watch, WatchEvent

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

__all__ = ["Leadership", "Leader", "campaign", "current", "observe"]

REWATCH_MIN = 0.050  #: seconds: the first pause before a re-watch
REWATCH_MAX = 2.0  #: seconds: the longest


class Leadership:
    """A won election: the leader's exclusive, auto-renewed lease on the key."""

    def __init__(self, lease: Lease) -> None:
        self.key = lease.key
        self.lease = lease

    @property
    def fencing_token(self) -> int:
        """The term's fencing token: send it with every write."""
        return self.lease.fencing_token

    @property
    def held(self) -> bool:
        """Whether the caller still leads (by its own clock)."""
        return self.lease.held

    @property
    def lost(self) -> asyncio.Event:
        """Set when leadership is lost (expired, a refused renewal) or resigned."""
        return self.lease.lost

    async def resign(self) -> None:
        """Give leadership up: the key is released and the next campaigner
        leads. NotHeldError if it was already lost."""
        await self.lease.release()


@dataclass
class Leader:
    """Who leads an election, as observe and current report it."""

    key: str
    present: bool  #: False when nobody leads (the fields below are then empty)
    owner: str = ""
    value: Optional[str] = None
    fencing_token: int = 0  #: names the term
    revision: int = 0  #: the backend's revision of the change (0 from current)


async def campaign(client: "Client", key: str, value: str, ttl: Optional[float] = None) -> Leadership:
    """Wait until the caller leads the election of ``key``: an exclusive,
    auto-renewed acquire (``ttl`` seconds, default 20 s, renewed at ttl/3)
    with ``value`` (typically the leader's address) stored beside it.
    Cancelling the awaiting task gives the campaign up."""
    lease = await client.acquire(key, ttl=ttl if ttl is not None else DEFAULT_TTL, value=value, auto_renew=True)
    return Leadership(lease)


async def current(client: "Client", key: str) -> Leader:
    """The election's leader now (present False when none)."""
    try:
        info = await client.inspect(key)
    except NotFoundError:
        return Leader(key=key, present=False)
    return Leader(key=key, present=True, owner=info.owner, value=info.value, fencing_token=info.fencing_token or 0)


def _leader(ev: WatchEvent) -> Leader:
    return Leader(key=ev.key, present=True, owner=ev.owner, value=ev.value, fencing_token=ev.fencing_token or 0,
                  revision=ev.revision)


async def observe(client: "Client", key: str) -> AsyncIterator[Leader]:
    """The election's leader: the current one (or one with present False)
    once the watch is in sync, then each change in order — a new leader, or
    none when the leader resigned or expired. When the watch breaks
    (connection lost, the service's leader changed, watch_overflow) it
    watches again, with backoff from 50 ms to 2 s, without repeating a
    leader already sent (de-duplicated by token); a leader that came and
    went meanwhile is not seen. It ends when the client closes; the first
    watch's failure (UnsupportedError: no watches) is raised."""
    w: Watch = await client.watch(key)
    cur: Optional[Leader] = None  # the leader last sent
    top = 0  # the highest leader token sent
    synced = False
    holder: Optional[WatchEvent] = None
    pause = REWATCH_MIN

    def fresh(ld: Leader) -> bool:
        nonlocal cur, top
        if cur is not None and not ld.present and not cur.present:
            return False  # still nobody (a re-watch's sync)
        if cur is not None and ld.present and ld.fencing_token <= top:
            return False  # sent already, or older than what was
        cur = ld
        top = max(top, ld.fencing_token)
        return True

    try:
        while True:
            try:
                ev = await w.next()
            except LockgateError:
                while True:
                    await asyncio.sleep(pause)
                    pause = min(2 * pause, REWATCH_MAX)
                    if client._closed or client._closing:
                        return
                    try:
                        w = await client.watch(key)
                        break
                    except LockgateError as e:
                        if e.code in ("unsupported", "client_closed"):
                            return
                synced, holder = False, None
                continue
            if ev is None:
                return  # closed
            if ev.type == "holder":
                if holder is None:
                    holder = ev  # the oldest holder leads
            elif ev.type == "synced":
                synced, pause = True, REWATCH_MIN
                ld = _leader(holder) if holder is not None else Leader(key=key, present=False, revision=ev.revision)
                if fresh(ld):
                    yield ld
            elif ev.type == "granted":
                ld = _leader(ev)
                if synced and fresh(ld):
                    yield ld
            elif ev.type in ("released", "expired"):
                if synced and cur is not None and cur.present and ev.fencing_token == cur.fencing_token:
                    ld = Leader(key=key, present=False, revision=ev.revision)
                    if fresh(ld):
                        yield ld
    finally:
        await w.aclose()
