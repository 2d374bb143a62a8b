"""The client's connection: one WebSocket to a gateway, replaced when it fails.

The connection runs in a task of its own (``_run``): it dials an endpoint
picked at random, follows the leader named by a ``not_leader`` answer or a
handshake redirect, and after a failure dials again with backoff and jitter,
preferring another endpoint (an address whose dial just failed is not
followed for ``DEAD_FOR`` seconds). Requests wait for it in ``_conn``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import TYPE_CHECKING, List

from . import _conn
from ._conn import Conn, ConnectError
from ._wire import backoff
from .errors import ClosedError, UnauthorizedError, UnavailableError, UnsupportedError

if TYPE_CHECKING:  # pragma: no cover
    import ssl as _ssl
    from typing import Any, Dict, Optional

log = logging.getLogger("lockgate")

DEAD_FOR = 1.0  #: seconds a redirect to an address that just failed a dial is not followed


class _Connection:
    """The Client's connection (a part of Client, which holds its state)."""

    if TYPE_CHECKING:  # pragma: no cover
        endpoints: List[str]
        dial_timeout: float
        max_hops: int
        signals_wanted: bool
        _secure: bool
        _ssl: Optional[_ssl.SSLContext]
        _token: Optional[str]
        _closed: bool
        _run_task: Optional[asyncio.Task]
        _cur: Optional[Conn]
        _ready: Optional[asyncio.Event]
        _idle: Optional[asyncio.Event]
        _dead: Dict[str, float]
        _dial_error: Optional[BaseException]
        request_timeout: float

        def _on_push(self, r: Dict[str, Any]) -> None: ...
        def _enter(self) -> Any: ...

    def _start(self) -> None:
        if self._run_task is None and not self._closed:
            self._ready = asyncio.Event()
            self._idle = asyncio.Event()
            self._idle.set()
            self._run_task = asyncio.get_running_loop().create_task(self._run())

    @property
    def endpoint(self) -> str:
        """The gateway the client is connected to (after redirects), or ""."""
        return self._cur.addr if self._cur is not None and not self._cur.closed else ""

    async def _run(self) -> None:
        attempt = 0
        nxt = ""
        avoid = ""
        while not self._closed:
            addr = nxt or self._pick(avoid)
            nxt = ""
            try:
                wc = await _conn.dial(addr, secure=self._secure, token=self._token, ssl=self._ssl,
                                      timeout=self.dial_timeout, max_hops=self.max_hops, on_push=self._on_push)
            except (ConnectError, UnauthorizedError, ValueError) as e:
                self._dial_error = e
                self._dead[addr] = time.monotonic()
                attempt += 1
                avoid = addr
                log.info("lockgate: connect to %s failed (attempt %d): %s", addr, attempt, e)
                await asyncio.sleep(backoff(attempt))
                continue
            self._dial_error = None
            self._dead.pop(addr, None)
            self.signals_wanted = wc.wanted
            self._cur = wc
            assert self._ready is not None
            self._ready.set()
            log.debug("lockgate: connected to %s", wc.addr)
            await wc.done.wait()
            self._cur = None
            self._ready = asyncio.Event()
            avoid = wc.addr if wc.avoid else ""
            if wc.redirect:
                nxt = wc.redirect
                continue
            log.info("lockgate: connection to %s lost: %r", wc.addr, wc.cause)
            if wc.useful or time.monotonic() - wc.born > 10.0:
                attempt = 0  # a connection that worked: reconnect at once
                avoid = wc.addr  # prefer another gateway
                continue
            attempt += 1
            avoid = wc.addr
            await asyncio.sleep(backoff(attempt))

    @staticmethod
    def _check_features(wc: Conn, needs: List[str], what: str) -> None:
        """UnsupportedError, before anything is sent, for a feature the
        gateway did not announce."""
        for f in needs:
            if f not in wc.features:
                raise UnsupportedError(f"{what}: the gateway {wc.addr} does not offer {f!r} "
                                       f"(Lockgate-Features: {','.join(wc.features) or 'none'})", None, f)

    async def features(self) -> List[str]:
        """What the gateway the client is (or was last) connected to
        announced in its upgrade's ``Lockgate-Features``: wanted, shared,
        semaphore, multikey, watch, lockdelay. Connects first if needed,
        bounded by ``request_timeout`` (UnavailableError)."""
        with self._enter():
            try:
                async with asyncio.timeout(self.request_timeout):
                    wc = await self._conn()
            except TimeoutError:
                raise UnavailableError("unavailable", f"features: no connection within {self.request_timeout:g} s"
                                       + (f" (last failure: {self._dial_error})" if self._dial_error else "")) from None
            return list(wc.features)

    def _pick(self, avoid: str) -> str:
        n = len(self.endpoints)
        i = random.randrange(n)
        if n > 1 and self.endpoints[i] == avoid:
            i = (i + 1 + random.randrange(n - 1)) % n
        return self.endpoints[i]

    def _is_dead(self, addr: str) -> bool:
        at = self._dead.get(addr)
        return at is not None and time.monotonic() - at < DEAD_FOR

    async def _conn(self) -> Conn:
        while True:
            if self._closed:
                raise ClosedError()
            wc = self._cur
            if wc is not None and not wc.closed:
                return wc
            assert self._ready is not None
            ready = self._ready
            if ready.is_set() and (self._cur is None or self._cur.closed):
                await asyncio.sleep(0)  # _run has not noticed the failure yet
                continue
            await ready.wait()
