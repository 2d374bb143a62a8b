"""One WebSocket connection to a gateway, and dialling one (with redirects)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import ssl as _ssl
import time
from typing import Any, Callable, Dict, List, Optional
from urllib.parse import urlsplit

import websockets
from websockets.exceptions import InvalidStatusCode
from websockets.legacy.client import Connect

from ._wire import leader_addr, ws_url
from .errors import UnauthorizedError

log = logging.getLogger("lockgate")

SUBPROTOCOL = "lockgate.v1"
FEATURES_HEADER = "Lockgate-Features"
MAX_MESSAGE = 64 << 10
PING_INTERVAL = 5.0  #: seconds between the client's pings
PING_TIMEOUT = 10.0  #: a pong later than this drops the connection (a vanished gateway)
MAX_STRIKES = 3  #: unavailable answers, or not_leader naming no leader, in a row before another gateway is tried

# Markers put into a request's reply queue instead of a reply.
DROPPED = object()  #: the connection failed before the answer
CLOSING = object()  #: the client is closing: a waiting acquire gives up


class WatchQueue(asyncio.Queue):
    """A watch's reply queue: bounded, so that a caller that does not read
    cannot make the connection's reader wait; one more message marks it
    overflowed (and calls on_overflow) instead."""

    def __init__(self, maxsize: int) -> None:
        super().__init__(maxsize)
        self.overflowed = False
        self.on_overflow: Optional[Callable[[], None]] = None

    def put_nowait(self, item: Any) -> None:
        try:
            super().put_nowait(item)
        except asyncio.QueueFull:
            if not self.overflowed:
                self.overflowed = True
                if self.on_overflow is not None:
                    self.on_overflow()


class ConnectError(Exception):
    """A connection attempt failed (refused, timed out, redirected too often)."""


class _Connect(Connect):
    # websockets follows 3xx redirects with a Location itself; the protocol
    # allows at most 5 hops.
    MAX_REDIRECTS_ALLOWED = 5


class Conn:
    """A live connection. Requests are multiplexed by id: the reader task
    puts each reply into the queue registered for its id."""

    def __init__(self, ws: Any, addr: str, wanted: bool, on_push: Callable[[Dict[str, Any]], None],
                 features: Optional[List[str]] = None) -> None:
        self.ws = ws
        self.addr = addr
        self.wanted = wanted
        #: the gateway's Lockgate-Features (wanted, shared, semaphore, multikey, watch, lockdelay)
        self.features: List[str] = list(features or [])
        self.born = time.monotonic()
        self.pending: Optional[Dict[str, asyncio.Queue]] = {}
        self.done = asyncio.Event()
        self.cause: Optional[BaseException] = None
        self.redirect = ""
        self.avoid = False
        self.closed = False
        self.strikes = 0
        self.useful = False
        self._on_push = on_push
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            async for data in self.ws:
                if isinstance(data, bytes):
                    continue
                try:
                    r = json.loads(data)
                except ValueError:
                    log.warning("lockgate: undecodable message from %s", self.addr)
                    continue
                if not isinstance(r, dict):
                    continue
                r["_arrived"] = time.monotonic()
                rid = r.get("id")
                if not rid:
                    if r.get("type") == "wanted":
                        self._on_push(r)
                    elif r.get("type") == "error":
                        log.warning("lockgate: gateway %s: error without request id: %s", self.addr, r.get("error"))
                    continue
                q = self.pending.get(rid) if self.pending is not None else None
                if q is not None:
                    q.put_nowait(r)
        except Exception as e:  # ConnectionClosed and the like: the connection is over
            self._mark(e)
        finally:
            self._mark(ConnectionError("connection closed"))
            pending, self.pending = self.pending, None
            for q in (pending or {}).values():
                q.put_nowait(DROPPED)
            self.done.set()

    def _mark(self, cause: BaseException) -> None:
        if not self.closed:
            self.closed = True
            self.cause = cause

    def register(self, rid: str, q: Optional[asyncio.Queue] = None) -> Optional[asyncio.Queue]:
        """The queue that receives the replies to ``rid`` (``q``, or a new
        unbounded one); None once the connection ended."""
        if self.pending is None or self.closed:
            return None
        if q is None:
            q = asyncio.Queue()
        self.pending[rid] = q
        return q

    def unregister(self, rid: str) -> None:
        if self.pending is not None:
            self.pending.pop(rid, None)

    async def send(self, req: Dict[str, Any]) -> None:
        """Write one request; a failure ends the connection and is raised."""
        try:
            await self.ws.send(json.dumps(req, separators=(",", ":"), ensure_ascii=False))
        except Exception as e:
            self.close_for("", False, e)
            raise

    def close_for(self, redirect: str, avoid: bool, cause: BaseException) -> None:
        """End the connection so that the client dials ``redirect`` next (a
        not_leader answer) or, with ``avoid``, prefers another gateway."""
        if not self.closed:
            self.redirect, self.avoid = redirect, avoid
        self._mark(cause)
        # Abort the transport: a polite close handshake would keep the
        # requests waiting for its timeout on a gateway we are leaving.
        transport = getattr(self.ws, "transport", None)
        if transport is not None:
            transport.abort()

    async def go_away(self) -> None:
        """Close politely (a close frame first)."""
        self._mark(ConnectionError("client closed"))
        try:
            await asyncio.wait_for(self.ws.close(1000, "client closing"), 1.0)
        except Exception:
            pass
        transport = getattr(self.ws, "transport", None)
        if transport is not None:
            transport.abort()
        await self.done.wait()

    def strike(self) -> None:
        self.strikes += 1
        if self.strikes >= MAX_STRIKES:
            self.close_for("", True, ConnectionError("gateway keeps answering unavailable or not_leader without a leader"))

    def good(self) -> None:
        self.strikes = 0
        self.useful = True


def _subprotocols(token: Optional[str]) -> List[str]:
    protos = [SUBPROTOCOL]
    if token:
        protos.append("lockgate.bearer." + base64.urlsafe_b64encode(token.encode()).decode().rstrip("="))
    return protos


async def dial(addr: str, *, secure: bool, token: Optional[str], ssl: Optional[_ssl.SSLContext],
               timeout: float, max_hops: int, on_push: Callable[[Dict[str, Any]], None]) -> Conn:
    """Connect to ``addr``, following refused handshakes that name the
    leader (HTTP 421 with a not_leader body, or 307 with a Location) for at
    most ``max_hops`` hops."""
    headers = {"User-Agent": "lockgate-python-client"}
    if token:
        headers["Authorization"] = "Bearer " + token
    for hop in range(max_hops + 1):
        url = ws_url(addr, secure)
        try:
            ws = await asyncio.wait_for(_Connect(
                url, subprotocols=_subprotocols(token), extra_headers=headers,
                open_timeout=timeout, ping_interval=PING_INTERVAL, ping_timeout=PING_TIMEOUT,
                close_timeout=1.0, max_size=MAX_MESSAGE, compression=None, ssl=ssl if url.startswith("wss:") else None,
            ), timeout)
        except InvalidStatusCode as e:
            if e.status_code == 401:
                raise UnauthorizedError() from e
            nxt = ""
            if e.status_code in (307, 308, 421):
                loc = e.headers.get("Location") if e.headers is not None else None
                if loc:
                    nxt = urlsplit(loc).netloc
                elif e.status_code == 421:
                    nxt = await _probe_leader(url, headers, ssl, timeout)
            if not nxt or nxt == addr or hop >= max_hops:
                raise ConnectError(f"dial {addr}: HTTP {e.status_code}") from e
            log.debug("lockgate: handshake redirected from %s to %s", addr, nxt)
            addr = nxt
            continue
        except (OSError, asyncio.TimeoutError, websockets.exceptions.WebSocketException) as e:
            raise ConnectError(f"dial {addr}: {e!r}") from e
        feats = ",".join(ws.response_headers.get_all(FEATURES_HEADER))
        features = [f.strip() for f in feats.split(",") if f.strip()]
        wanted = "wanted" in features
        # A 307 the library followed itself leaves us on another host: name
        # the connection by where it ended up.
        final = addr
        host, port = getattr(ws, "_host", None), getattr(ws, "_port", None)
        if host and port and urlsplit(url).hostname is not None:
            final = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return Conn(ws, final, wanted, on_push, features)
    raise ConnectError(f"dial {addr}: too many redirects")


async def _probe_leader(url: str, headers: Dict[str, str], ssl: Optional[_ssl.SSLContext], timeout: float) -> str:
    """websockets does not expose the body of a refused handshake: repeat
    the upgrade request by hand and read the 421's JSON body for the leader."""
    u = urlsplit(url)
    host = u.hostname or ""
    port = u.port or (443 if u.scheme == "wss" else 80)
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=ssl if u.scheme == "wss" else None), timeout)
    except (OSError, asyncio.TimeoutError):
        return ""
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {u.path or '/v1/ws'} HTTP/1.1", f"Host: {u.netloc}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13",
                 f"Sec-WebSocket-Protocol: {SUBPROTOCOL}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        status_line, *hdrs = head.decode("latin-1").split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or parts[1] != "421":
            return ""
        length = -1
        for h in hdrs:
            k, _, v = h.partition(":")
            if k.strip().lower() == "content-length" and v.strip().isdigit():
                length = int(v.strip())
        if length > MAX_MESSAGE:
            return ""
        body = await asyncio.wait_for(reader.readexactly(length) if length >= 0 else reader.read(MAX_MESSAGE), timeout)
        return leader_addr(json.loads(body))
    except Exception:
        return ""
    finally:
        writer.close()
