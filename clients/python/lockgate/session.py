"""Sessions: many leases kept alive by one keep-alive.

A session's leases share its TTL and its deadline; one ``renewSession``
(command 12) renews them all on the server, whatever their number. A session
that ends — a keep-alive refused (``session_expired``), its deadline passed,
or closed — ends every lease in it with the same reason.

Deadline rule (the lease's, applied to the session): a session lease's
deadline is the session's, ``sent + ttl − (ttl/100 + 2 ms)``, ``sent`` being
when the last ``openSession`` or ``renewSession`` that succeeded was sent.
Acquiring a lease in a session does not move the session's deadline.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Set

from ._keepalive import Expiring
from ._wire import deadline as _deadline

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client
    from .lease import Lease

__all__ = ["Session", "SessionStats"]


@dataclass
class SessionStats:
    """What became of the client's own session (``Client.session_stats()``;
    the Go SDK's ``client.SessionStats``): all zero with sessions off or a
    gateway without them."""

    opened: int = 0  #: sessions the client opened for its own use
    refused: int = 0  #: opens of its own session refused quota_exceeded or too_many_sessions
    #: acquires whose leases would have gone into the client's session but were made without one, renewed on
    #: their own, because opening it was refused (now, or less than ``session_retry`` before)
    fallbacks: int = 0
    falling_back: bool = False  #: the last open was refused and none has succeeded since


class Session(Expiring):
    """A group of leases kept alive together: ``client.acquire(key,
    session=s)`` puts a lease in it. ``ended`` (an ``asyncio.Event``) is set
    when it ends, and ``end_reason`` says why — ``"expired"`` (its deadline
    passed without a successful keep-alive), ``"not_held"`` (the server
    refused a keep-alive: the session was gone) or ``"released"`` (closed);
    every lease of it ends with the same ``lost_reason``.

    ``id`` is the server's secret id of the session: whoever knows it can
    renew and close it. ``ttl`` is in seconds; ``deadline`` and ``sent`` are
    ``time.monotonic()`` instants.
    """

    def __init__(self, client: "Client", session_id: str, owner: str, ttl: float, sent: float) -> None:
        self._client = client
        self.id = session_id
        self.owner = owner
        self.ttl = ttl  #: seconds: the session's TTL, and every lease's in it
        self.sent = sent  #: time.monotonic() when the request that started the current TTL was sent
        self.deadline = _deadline(sent, ttl)  #: after it, no lease of the session may be acted on
        self.ended = asyncio.Event()
        self.end_reason: Optional[str] = None
        self.renewals = 0  #: keep-alives that succeeded (automatic and explicit)
        self._leases: Set["Lease"] = set()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._keepalive: Optional["asyncio.Task[None]"] = None
        self._arm()

    # -- state ---------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Whether the session lives by this client's clock."""
        return not self.ended.is_set() and time.monotonic() < self.deadline

    @property
    def leases(self) -> int:
        """How many live leases the session holds."""
        return len(self._leases)

    @property
    def keep_alive(self) -> bool:
        """Whether the session renews itself every ttl/3."""
        return self._keepalive is not None

    def __repr__(self) -> str:
        state = self.end_reason or ("alive" if self.alive else "expiring")
        return f"<Session {self.id[:8]}… {state} {len(self._leases)} leases>"

    # -- operations ----------------------------------------------------------

    async def renew(self) -> None:
        """One keep-alive now (see :meth:`Client.renew_session`)."""
        await self._client.renew_session(self)

    async def close(self) -> None:
        """Close the session (see :meth:`Client.close_session`)."""
        await self._client.close_session(self)

    def stop_keep_alive(self) -> None:
        """Stop the keep-alive: the session and its leases then end at its
        deadline unless renewed."""
        ka = self._keepalive
        self._keepalive = None
        if ka is not None and ka is not asyncio.current_task():
            ka.cancel()

    # -- bookkeeping (the client's) --------------------------------------------

    def _add(self, lease: "Lease") -> bool:
        if self.ended.is_set():
            return False
        self._leases.add(lease)
        return True

    def _remove(self, lease: "Lease") -> None:
        self._leases.discard(lease)

    def _extend(self, sent: float) -> bool:
        """Record a keep-alive sent at ``sent`` that succeeded: the session
        and every lease in it live ttl from it. False once it has ended."""
        if self.ended.is_set():
            return False
        self.renewals += 1
        new = _deadline(sent, self.ttl)
        if new > self.deadline:  # an answer for an older copy never moves it back
            self.sent, self.deadline = sent, new
        for lease in list(self._leases):
            lease._extend(self.sent, self.ttl)
        self._arm()
        return True

    def _end(self, reason: str) -> None:
        if self.ended.is_set():
            return
        self.end_reason = reason
        self.ended.set()
        self._disarm()
        self.stop_keep_alive()
        leases, self._leases = list(self._leases), set()
        for lease in leases:
            lease._end(reason)
        self._client._forget_session(self)
