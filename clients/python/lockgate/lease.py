"""Leases: what a grant gives its holder, and how the holder learns it ended."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Optional

from ._keepalive import Expiring
from ._wire import deadline as _deadline

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client
    from .session import Session

__all__ = ["Lease", "LockInfo", "HolderInfo"]


class Lease(Expiring):
    """A granted lock. Act as the holder only while ``held`` is true (before
    ``deadline``, and ``lost`` not set), and send ``fencing_token`` with every
    write to a fenced resource.

    ``lost`` (an ``asyncio.Event``) is set the moment the lease ends, the
    counterpart of the Go SDK's ``Lease.Done()``; ``lost_reason`` then says
    why: ``"released"`` (by its holder), ``"expired"`` (its deadline passed
    without a successful renewal), or ``"not_held"`` (the gateway refused a
    renewal or release: it expired or was granted to someone else).

    ``wanted`` (an ``asyncio.Event``) is set when the gateway says another
    caller waits for the key (the ``wanted`` push, or a grant made while
    others already waited). It is a hint, never a revocation.

    ``session`` is the :class:`~lockgate.Session` the lease belongs to, or
    None: a session lease has the session's TTL, is renewed by the session's
    keep-alive (not on its own), its deadline is the session's, and it ends
    when the session does.
    """

    def __init__(self, client: "Client", key: str, owner: str, fencing_token: int, lock_token: str,
                 ttl: float, sent: float, value: Optional[str] = None, mode: str = "exclusive",
                 permits: int = 0, session: Optional["Session"] = None) -> None:
        self._client = client
        self.key = key
        self.owner = owner
        self.fencing_token = fencing_token
        self.lock_token = lock_token
        self.value = value
        self.mode = mode  #: "shared" for a read lock or a semaphore permit, else "exclusive"
        self.permits = permits  #: a semaphore permit's number of permits (0 otherwise)
        self.session = session  #: the session the lease belongs to, or None
        if session is not None:
            ttl, sent = session.ttl, session.sent
        self.ttl = ttl  #: seconds, as granted (or last renewed)
        self.sent = sent  #: time.monotonic() when the request that started the current TTL was sent
        self.deadline = _deadline(sent, ttl)  #: time.monotonic() after which the holder must stop acting
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None
        self.wanted = asyncio.Event()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._keepalive: Optional["asyncio.Task[None]"] = None
        if session is not None and not session._add(self):
            self._end(session.end_reason or "expired")
            return
        self._arm()

    # -- state ---------------------------------------------------------------

    @property
    def held(self) -> bool:
        """Whether the holder may still act: not ended, deadline not passed."""
        return not self.lost.is_set() and time.monotonic() < self.deadline

    def remaining(self) -> float:
        """Seconds left until the deadline (≤ 0 once it passed or the lease ended)."""
        if self.lost.is_set():
            return 0.0
        return self.deadline - time.monotonic()

    def __repr__(self) -> str:
        state = self.lost_reason or ("held" if self.held else "expiring")
        return f"<Lease {self.key!r} token={self.fencing_token} {state} {self.remaining():.3f}s left>"

    # -- operations ----------------------------------------------------------

    async def release(self) -> None:
        """Release the lease (see :meth:`Client.release`)."""
        await self._client.release(self)

    async def renew(self, ttl: Optional[float] = None) -> None:
        """Renew the lease to ``ttl`` seconds (default: its current TTL)."""
        await self._client.renew(self, ttl)

    async def __aenter__(self) -> "Lease":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client._release_on_exit(self)

    # -- bookkeeping (the client's) --------------------------------------------

    def _extend(self, sent: float, ttl: float) -> bool:
        """Record a successful renewal sent at ``sent``; False if the lease
        already ended (a renewal cannot bring it back)."""
        if self.lost.is_set():
            return False
        self.ttl = ttl
        new = _deadline(sent, ttl)
        if new > self.deadline:
            self.sent, self.deadline = sent, new
        self._arm()
        return True

    def _mark_wanted(self) -> None:
        if self.wanted.is_set():
            return
        self.wanted.set()
        self._client._wanted(self)

    def _end(self, reason: str) -> None:
        if self.lost.is_set():
            return
        self.lost_reason = reason
        self.lost.set()
        self._disarm()
        ka = self._keepalive
        self._keepalive = None
        if ka is not None and ka is not asyncio.current_task():
            ka.cancel()
        if self.session is not None:
            self.session._remove(self)
        self._client._untrack(self)


@dataclass
class LockInfo:
    """What inspect reports of a held key."""

    key: str
    owner: str
    fencing_token: Optional[int]
    value: Optional[str]
    expires_in: Optional[float]  #: seconds, as the gateway counted when it answered
    waiters: int  #: callers queued for the key (-1: the gateway did not say)
    mode: str = "exclusive"  #: "shared" for read locks and semaphores
    permits: int = 0  #: a semaphore's permits (0 otherwise)
    holders: "List[HolderInfo]" = field(default_factory=list)  #: a shared key's holders, oldest grant first


@dataclass
class HolderInfo:
    """One holder of a shared key, as inspect reports it."""

    owner: str
    fencing_token: Optional[int]
    value: Optional[str]
    expires_in: Optional[float]  #: seconds
