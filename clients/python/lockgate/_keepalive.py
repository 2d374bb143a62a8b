"""The keep-alive timer of leases and sessions, and their deadline timer.

A lease that renews itself and a session's keep-alive follow one schedule:
renew ttl/3 after the TTL (re)started, retry a transient failure with
jittered backoff (up to ttl/10, so that a new leader is found in time) while
the deadline allows, stop when the server says it no longer has what is
renewed (the loss, which ends it) or the client closes, and leave the rest to
the deadline timer, which ends it as ``"expired"``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, Optional, Protocol, Tuple, Type

from ._wire import backoff
from .errors import ClosedError, LockgateError

log = logging.getLogger("lockgate")


class Renewed(Protocol):
    """What a keep-alive renews: a lease or a session."""

    ttl: float  #: seconds
    sent: float  #: time.monotonic() when the request that started the current TTL was sent
    deadline: float  #: time.monotonic() after which it must not be acted on

    def _end(self, reason: str) -> None: ...


def keep_alive(target: Renewed, ended: asyncio.Event, renew: Callable[[float], Awaitable[float]], *,
               what: str, loss: Tuple[Type[BaseException], ...], closed: Callable[[], bool]) -> "asyncio.Task[None]":
    """Start renewing ``target`` until ``ended`` is set or ``closed()``.

    ``renew(timeout)`` is one renewal bounded by ``timeout`` seconds (what is
    left to the deadline); it returns the send time of the answered copy, and
    raises one of ``loss`` when the server no longer has ``target``, which
    then ends as ``"not_held"``. ``what`` names it in the log."""
    return asyncio.ensure_future(_run(target, ended, renew, what, loss, closed))


async def _run(target: Renewed, ended: asyncio.Event, renew: Callable[[float], Awaitable[float]], what: str,
               loss: Tuple[Type[BaseException], ...], closed: Callable[[], bool]) -> None:
    # The next renewal is due ttl/3 after the later of the TTL's start and
    # the last renewal this timer sent (the first: after it started).
    last = time.monotonic()
    try:
        while not ended.is_set() and not closed():
            await asyncio.sleep(max(0.0, max(target.sent, last) + target.ttl / 3 - time.monotonic()))
            attempt = 0
            while not ended.is_set() and not closed():
                left = target.deadline - time.monotonic()
                if left <= 0:
                    return  # the deadline timer ends it
                try:
                    last = await renew(left)
                    break
                except loss:
                    target._end("not_held")
                    return
                except ClosedError:
                    return
                except LockgateError as e:
                    attempt += 1
                    log.info("lockgate: renewing %s failed (attempt %d): %s", what, attempt, e)
                    await asyncio.sleep(backoff(attempt, cap=max(0.01, target.ttl / 10)))
    except asyncio.CancelledError:
        pass


class Expiring:
    """The deadline timer: ``_end("expired")`` once ``deadline`` passes
    (``_arm`` again whenever it moves)."""

    deadline: float
    _timer: Optional[asyncio.TimerHandle] = None

    def _end(self, reason: str) -> None:  # pragma: no cover - the subclass's
        raise NotImplementedError

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        # loop.time() is time.monotonic() on the default loops.
        self._timer = loop.call_later(max(0.0, self.deadline - time.monotonic()), self._expire)

    def _expire(self) -> None:
        self._timer = None
        if time.monotonic() >= self.deadline:
            self._end("expired")
        else:  # extended meanwhile by a renewal whose timer was set late
            self._arm()

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
