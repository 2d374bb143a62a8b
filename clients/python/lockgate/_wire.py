"""Protocol arithmetic without I/O: tokens, deadlines, backoff, validation."""

from __future__ import annotations

import random
import secrets
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

from .errors import ValidationError

# Command types of the WebSocket protocol (docs/protocol.md).
CMD_ACQUIRE = 1
CMD_RELEASE = 2
CMD_RENEW = 3
CMD_INSPECT = 4
CMD_TRY_ACQUIRE = 5
CMD_CANCEL = 6

MIN_TTL = 0.010  #: seconds: the shortest TTL a lease may ask for
MAX_TTL = 24 * 3600.0  #: seconds: the longest
DEFAULT_TTL = 20.0  #: seconds: the TTL of an acquire without one (then renewed automatically)
MAX_KEY_BYTES = 1024  #: the client refuses longer keys itself; the gateway may bound them lower
MAX_VALUE_BYTES = 4096
BACKOFF_BASE = 0.050  #: seconds: the first retry pause (before jitter)
BACKOFF_MAX = 2.0  #: seconds: the longest retry pause (before jitter)


def parse_token(v: Any) -> Optional[int]:
    """A fencing token as v1 sends it (``{"key", "value"}``) or as older
    servers do (a bare number); None when absent."""
    if v is None:
        return None
    if isinstance(v, dict):
        v = v.get("value")
        if v is None:
            return None
    if isinstance(v, bool):
        raise ValueError(f"fencing token {v!r} is not a number")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and v.isdigit():
        return int(v)
    raise ValueError(f"fencing token {v!r} is not a number")


def deadline(sent: float, ttl: float) -> float:
    """The holder's deadline (docs/protocol.md): ``sent + ttl − (ttl/100 +
    2 ms)``, all in seconds on the monotonic clock; ``sent`` is when the
    request that started the TTL was sent."""
    return sent + ttl - (ttl * 0.01 + 0.002)


def ms(seconds: float) -> int:
    """Seconds as whole milliseconds, rounded down: the server's TTL is then
    never longer than the one the client computes its deadline from."""
    return int(seconds * 1000.0 + 1e-9)


def backoff(attempt: int, base: float = BACKOFF_BASE, cap: float = BACKOFF_MAX,
            rand: Optional[random.Random] = None) -> float:
    """The pause before retry number ``attempt`` (1, 2, …): ``base``
    doubling to ``cap``, with full jitter (uniform in [0, that])."""
    if attempt < 1:
        attempt = 1
    ceiling = min(cap, base * (2 ** min(attempt - 1, 32)))
    return (rand or random).uniform(0.0, ceiling)


def new_handle() -> str:
    """A client-chosen lock token for an acquire: 128 random bits in hex."""
    return secrets.token_hex(16)


def validate_key(key: Any) -> None:
    if not isinstance(key, str) or key == "":
        raise ValidationError("invalid_key", "the key must be a non-empty string", key if isinstance(key, str) else None)
    n = len(key.encode("utf-8", "surrogatepass"))
    if n > MAX_KEY_BYTES:
        raise ValidationError("invalid_key", f"the key is {n} bytes, longer than {MAX_KEY_BYTES}", key[:32] + "…")


def validate_ttl(ttl: Optional[float]) -> Optional[float]:
    """None stays None (the default TTL); anything else must be MIN_TTL ≤ ttl ≤ MAX_TTL seconds."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise ValidationError("invalid_ttl", f"ttl {ttl!r} is not a number of seconds")
    if ttl < MIN_TTL - 1e-9 or ttl > MAX_TTL:
        raise ValidationError("invalid_ttl", f"ttl {ttl!r} s is outside [{MIN_TTL}, {MAX_TTL}] s")
    return float(ttl)


def validate_value(value: Optional[str]) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise ValidationError("invalid_value", "value must be a str")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_VALUE_BYTES:
        raise ValidationError("invalid_value", f"value is longer than {MAX_VALUE_BYTES} bytes")


def ws_url(endpoint: str, secure: bool) -> str:
    """The WebSocket URL of an endpoint: ``host:port`` (ws://, or wss://
    when the client speaks TLS), or a ws/wss/http/https URL."""
    if "://" not in endpoint:
        endpoint = ("wss://" if secure else "ws://") + endpoint
    u = urlsplit(endpoint)
    scheme = {"ws": "ws", "wss": "wss", "http": "ws", "https": "wss"}.get(u.scheme)
    if scheme is None:
        raise ValueError(f"lockgate: endpoint {endpoint!r}: scheme {u.scheme!r} is not ws, wss, http or https")
    if not u.netloc:
        raise ValueError(f"lockgate: endpoint {endpoint!r} has no host")
    path = u.path if u.path not in ("", "/") else "/v1/ws"
    return urlunsplit((scheme, u.netloc, path, u.query, ""))


def leader_addr(body: Any) -> str:
    """The leader's address named by a not_leader error body or object."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    if not isinstance(body, dict):
        return ""
    ld = body.get("leader")
    if isinstance(ld, dict) and isinstance(ld.get("addr"), str):
        return ld["addr"]
    return ""
