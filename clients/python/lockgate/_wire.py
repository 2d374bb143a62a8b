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
CMD_ACQUIRE_ALL = 7
CMD_TRY_ACQUIRE_ALL = 8
CMD_WATCH = 9
CMD_UNWATCH = 10
CMD_OPEN_SESSION = 11
CMD_RENEW_SESSION = 12
CMD_CLOSE_SESSION = 13

MIN_TTL = 0.010  #: seconds: the shortest TTL a lease may ask for
MAX_TTL = 24 * 3600.0  #: seconds: the longest
DEFAULT_TTL = 20.0  #: seconds: the TTL of an acquire without one (then renewed automatically)
MAX_KEY_BYTES = 1024  #: the client refuses longer keys itself; the gateway may bound them lower
MAX_VALUE_BYTES = 4096
MAX_PERMITS = 65536  #: the most permits a semaphore may have
MAX_LOCK_DELAY = 60.0  #: seconds: the longest lock-delay
MAX_MULTI_KEYS = 64  #: the most keys of one acquire_all
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


def validate_primitives(mode: Optional[str], permits: Optional[int],
                        lock_delay: Optional[float]) -> "tuple[str, int, int, list[str]]":
    """Check the primitives' acquire options as the gateway would: the mode
    ("exclusive" or "shared"; a semaphore permit is shared), the permits
    (0 … MAX_PERMITS) and the lock-delay (seconds, 0 … MAX_LOCK_DELAY).
    Returns (mode, permits, lock-delay ms, the gateway features needed)."""
    if mode is not None and mode not in ("exclusive", "shared"):
        raise ValidationError("invalid_mode", f"mode {mode!r} is neither 'exclusive' nor 'shared'")
    if permits is not None and (isinstance(permits, bool) or not isinstance(permits, int)
                                or permits < 0 or permits > MAX_PERMITS):
        raise ValidationError("invalid_permits", f"permits {permits!r} is not an integer within 0 … {MAX_PERMITS}")
    if lock_delay is not None and (isinstance(lock_delay, bool) or not isinstance(lock_delay, (int, float))
                                   or lock_delay < 0 or lock_delay > MAX_LOCK_DELAY):
        raise ValidationError("invalid_lock_delay", f"lock_delay {lock_delay!r} s is outside [0, {MAX_LOCK_DELAY:g}] s")
    n = permits or 0
    m = "shared" if n > 0 else (mode or "exclusive")
    delay = ms(lock_delay) if lock_delay else 0
    needs = []
    if n > 0:
        needs.append("semaphore")
    elif m == "shared":
        needs.append("shared")
    if delay > 0:
        needs.append("lockdelay")
    return m, n, delay, needs


def validate_keys(keys: Any) -> "list[str]":
    """The keys of an acquire_all: 1 … MAX_MULTI_KEYS valid keys, none twice."""
    if isinstance(keys, str) or not hasattr(keys, "__iter__"):
        raise ValidationError("invalid_keys", "keys must be a list of keys")
    keys = list(keys)
    if not keys or len(keys) > MAX_MULTI_KEYS:
        raise ValidationError("invalid_keys", f"keys must list 1 … {MAX_MULTI_KEYS} keys, not {len(keys)}")
    seen = set()
    for k in keys:
        validate_key(k)
        if k in seen:
            raise ValidationError("invalid_keys", f"key {k!r} is listed twice")
        seen.add(k)
    return keys
