"""The primitives beyond one exclusive lock: the mode, permits and
lock-delay fields of an acquire, and acquire_all / try_acquire_all (every
key at once, all or nothing; the gateway's ``multikey`` feature).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Union

from ._calls import _Call
from ._leases import _acquire_defaults
from ._sessions import OUTSIDE
from ._wire import (
    CMD_ACQUIRE_ALL, CMD_TRY_ACQUIRE_ALL, ms, new_handle, validate_keys, validate_primitives, validate_ttl,
    validate_value,
)
from .errors import LockgateError, NotHeldError, UnavailableError
from .lease import Lease
from .session import Session

if TYPE_CHECKING:  # pragma: no cover
    from ._cache import LeaseCache

log = logging.getLogger("lockgate")


class _Primitives:
    """The Client's all-or-nothing acquires (a part of Client, which holds its state)."""

    if TYPE_CHECKING:  # pragma: no cover
        client_id: str
        _cache: Optional[LeaseCache]

        def _enter(self) -> Any: ...
        async def _release_quietly(self, lease: Lease) -> None: ...
        async def _release(self, lease: Lease) -> None: ...
        async def _release_raced(self, r: Dict[str, Any]) -> None: ...
        async def _send_acquire(self, k: _Call, waiting: bool, wait: Optional[float], wait_until: Optional[float],
                                key: str) -> Dict[str, Any]: ...
        async def _lease(self, r: Dict[str, Any], key: str, ttl: float, value: Optional[str], auto_renew: bool,
                         sent: float, session: Optional[Session] = None) -> Optional[Lease]: ...
        async def _session_for(self, session: "Union[Session, bool, None]", ttl: Optional[float],
                               auto_renew: bool) -> Any: ...
        def _outside_ttl(self, ttl: float) -> float: ...
        @staticmethod
        def _session_fields(req: Dict[str, Any], s: Optional[Session]) -> None: ...
        def _session_gone(self, r: Dict[str, Any], s: Optional[Session], asked: "Union[Session, bool, None]",
                          key: str, before: int) -> bool: ...
        @staticmethod
        def _unexpected(r: Dict[str, Any], key: str, want: str) -> LockgateError: ...

    @staticmethod
    def _primitive_fields(req: Dict[str, Any], prim: "tuple[str, int, int, List[str]]") -> None:
        mode, permits, delay, _ = prim
        if mode == "shared":
            req["mode"] = "shared"
        if permits > 0:
            req["permits"] = permits
        if delay > 0:
            req["lockDelayMs"] = delay

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
