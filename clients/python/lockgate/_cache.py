"""The lease cache (``Client(cache_leases=True)``), the Go SDK's client/cache.go
in asyncio: a lease the application releases stays with the client, unused,
still held on the server and still renewed, so that the application's next
acquire of the same key costs no round trip. A kept lease is released for
real as soon as the gateway says another caller waits for its key (the
``wanted`` push), after ``cache_idle`` seconds unused, or at ``close()``.
docs/lease-cache.md in the lockgate repository describes the design.

Everything here runs on the client's event loop: no locks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Optional, Set, Tuple

from .errors import NotHeldError
from .lease import Lease

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

log = logging.getLogger("lockgate")

DEFAULT_CACHE_IDLE = 10.0  #: seconds an unused lease stays cached
DEFAULT_MAX_CACHED_LEASES = 1024  #: unused leases kept at most

#: What an acquire asks for, normalized: (ttl seconds, value, auto_renew).
Opts = Tuple[float, Optional[str], bool]


@dataclass
class CacheStats:
    """What the lease cache did (``Client.cache_stats()``); all zero with the cache off."""

    hits: int = 0  #: acquires answered from the cache, without a round trip
    misses: int = 0  #: acquires that went to the gateway with the cache on
    kept: int = 0  #: releases that kept the lease, unused, in the cache
    reclaimed: int = 0  #: unused leases released for real because another caller waited for the key
    idle: int = 0  #: unused leases released for real after cache_idle
    unused: int = 0  #: leases the cache holds unused now


class _Entry:
    """A lease granted with the cache on, in use by the application or kept unused."""

    __slots__ = ("lease", "opts", "in_use", "idle_at", "renew_at", "timer")

    def __init__(self, lease: Lease, opts: Opts) -> None:
        self.lease = lease
        self.opts = opts
        self.in_use = True
        # While unused: idle_at is when it is released for real; renew_at, for
        # a lease the application did not ask to auto-renew (auto-renewed
        # leases keep their own keep-alive throughout), when the cache renews
        # it next (0: never). timer fires at the earlier of the two.
        self.idle_at = 0.0
        self.renew_at = 0.0
        self.timer: Optional[asyncio.TimerHandle] = None

    def serves(self, opts: Opts, lock_token: Optional[str]) -> bool:
        """Whether this unused lease can answer an acquire with ``opts``:
        still alive, nobody waits for it, the same options, and at least
        half its TTL left (a lease whose renewals lag is not handed out)."""
        lease = self.lease
        return (not lease.lost.is_set() and not lease.wanted.is_set() and opts == self.opts
                and (lock_token is None or lock_token == lease.lock_token)
                and lease.deadline - time.monotonic() > lease.ttl / 2)


class LeaseCache:
    """One lease per key at most: the client cannot hold a key twice."""

    def __init__(self, client: "Client", idle: float, max_unused: int) -> None:
        self._client = client
        self._idle_for = idle
        self._max_unused = max_unused
        self._entries: Dict[str, _Entry] = {}
        self._unused = 0
        self._closed = False
        self._stats = CacheStats()
        self._tasks: Set["asyncio.Task[Any]"] = set()  # real releases and renewals under way

    def stats(self) -> CacheStats:
        s = self._stats
        return CacheStats(s.hits, s.misses, s.kept, s.reclaimed, s.idle, self._unused)

    # -- the application's calls -------------------------------------------------

    def take(self, key: str, opts: Opts, lock_token: Optional[str]) -> Tuple[Optional[Lease], Optional[Lease]]:
        """(hit, stale): the cached lease of ``key``, now in use, if it can
        serve the acquire; else stale, an unused lease of ``key`` that cannot
        (other options, wanted, too close to its deadline), which has left the
        cache and which the caller must release for real before it asks the
        gateway, or it would wait behind its own lease."""
        e = self._entries.get(key)
        if e is None or e.in_use:
            self._stats.misses += 1
            return None, None
        self._stop(e)
        if not e.serves(opts, lock_token):
            del self._entries[key]
            self._stats.misses += 1
            return None, e.lease
        e.in_use = True
        self._stats.hits += 1
        return e.lease, None

    def evict(self, keys: "list[str]") -> "list[Lease]":
        """Take the unused leases of ``keys`` out of the cache, for the
        caller to release for real: an acquire the cache cannot serve
        (shared, semaphore, lock-delay, several keys) would otherwise wait
        behind them."""
        out = []
        for key in keys:
            e = self._entries.get(key)
            if e is None or e.in_use:
                continue
            self._stop(e)
            del self._entries[key]
            self._stats.misses += 1
            out.append(e.lease)
        return out

    def hold(self, lease: Lease, opts: Opts) -> None:
        """Record a lease the gateway granted with the cache on, in use."""
        if self._closed:
            return
        e = self._entries.get(lease.key)
        if e is not None:
            if not e.lease.lost.is_set():
                return  # cannot happen while e lives: the key is ours once
            self._stop(e)
        self._entries[lease.key] = _Entry(lease, opts)

    def put(self, lease: Lease, gateway_tells: bool) -> bool:
        """Release's part: keep ``lease`` unused and return True, or return
        False for a real release. A lease that is wanted, ended, or may not
        be kept (the cache is closed or full, or the gateway does not push
        ``wanted``, so that nobody could reclaim it) leaves the cache. The
        release of a lease kept already raises NotHeldError."""
        e = self._entries.get(lease.key)
        if e is None or e.lease is not lease:
            return False
        if not e.in_use:
            raise NotHeldError(f"{lease.key!r} (token {lease.fencing_token}) was released already; the client's "
                               "lease cache keeps it until another caller wants it", lease.key)
        if (self._closed or not gateway_tells or lease.lost.is_set() or lease.wanted.is_set()
                or self._unused >= self._max_unused):
            del self._entries[lease.key]
            return False
        e.in_use = False
        self._unused += 1
        self._stats.kept += 1
        now = time.monotonic()
        e.idle_at = now + self._idle_for
        e.renew_at = 0.0 if e.opts[2] else now + lease.ttl / 3
        self._arm(e)
        return True

    # -- the lease's events --------------------------------------------------------

    def reclaim(self, lease: Lease) -> None:
        """The lease was marked wanted: an unused lease is released for real
        at once; one in use is left to the application, which sees
        ``lease.wanted`` (and whose release then releases it for real)."""
        e = self._entries.get(lease.key)
        if e is None or e.lease is not lease or e.in_use:
            return
        self._stats.reclaimed += 1
        self._evict(e)

    def drop(self, lease: Lease) -> None:
        """The lease ended (a refused renewal, its deadline, a real
        release): it leaves the cache and is never handed out."""
        e = self._entries.get(lease.key)
        if e is not None and e.lease is lease:
            self._stop(e)
            del self._entries[lease.key]

    async def close(self) -> None:
        """Stop caching and release every unused lease for real, waiting for
        the releases (each bounded by the client's request_timeout)."""
        self._closed = True
        doomed = []
        for key, e in list(self._entries.items()):
            if not e.in_use:
                self._stop(e)
                del self._entries[key]
                doomed.append(e.lease)
        if doomed:
            await asyncio.gather(*(self._client._release_quietly(lease) for lease in doomed))

    # -- internals -------------------------------------------------------------------

    def _stop(self, e: _Entry) -> None:
        """End e's unused state (if it was unused): its timer stops."""
        if e.timer is not None:
            e.timer.cancel()
            e.timer = None
        if not e.in_use:
            self._unused -= 1
            e.in_use = True  # no longer counted; the entry is taken or gone

    def _arm(self, e: _Entry) -> None:
        """(Re)start e's timer for its next idle check or renewal. asyncio's
        TimerHandle cannot be reset: the handle is replaced (a small object;
        no task)."""
        at = e.idle_at
        if e.renew_at and e.renew_at < at:
            at = e.renew_at
        if e.timer is not None:
            e.timer.cancel()
        e.timer = asyncio.get_running_loop().call_at(at, self._tick, e)  # loop.time() is time.monotonic()

    def _tick(self, e: _Entry) -> None:
        """e's timer: an unused lease idle for cache_idle is released for
        real; one the application did not ask to auto-renew is renewed at
        ttl/3 while it waits (a refused renewal ends it, and drop removes it)."""
        e.timer = None
        if self._entries.get(e.lease.key) is not e or e.in_use:
            return  # taken again, or gone, since the timer was set
        now = time.monotonic()
        if now >= e.idle_at:
            self._stats.idle += 1
            self._evict(e)
            return
        if e.renew_at and now >= e.renew_at:
            e.renew_at = now + e.lease.ttl / 3
            self._spawn(self._client._cache_renew(e.lease))
        self._arm(e)

    def _evict(self, e: _Entry) -> None:
        """Remove the unused entry e and release its lease for real in the background."""
        self._stop(e)
        del self._entries[e.lease.key]
        self._spawn(self._client._release_quietly(e.lease))

    def _spawn(self, coro: Any) -> None:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
