"""The errors of the lockgate client.

Every error the gateway answers is a :class:`LockgateError` whose ``code`` is
the protocol's error code (docs/protocol.md, "Error codes"); the codes that a
caller handles differently have their own subclass. Cancellation is
``asyncio.CancelledError`` (the client cancels a queued acquire on the
gateway first), never an error of this module.
"""

from __future__ import annotations

import builtins
from typing import Any, Optional

__all__ = [
    "LockgateError",
    "HeldError",
    "NotHeldError",
    "NotFoundError",
    "NotLeaderError",
    "UnavailableError",
    "ClosedError",
    "LockTimeoutError",
    "ValidationError",
    "UnauthorizedError",
    "UnsupportedError",
    "DelayedError",
    "PermitsMismatchError",
    "WatchOverflowError",
    "SessionExpiredError",
    "ForbiddenError",
    "QuotaExceededError",
    "RateLimitedError",
    "error_from_reply",
]


class LockgateError(Exception):
    """An error of a lockgate call. ``code`` is the protocol's error code."""

    def __init__(self, code: str, message: str = "", key: Optional[str] = None) -> None:
        self.code = code
        self.message = message
        self.key = key
        text = f"lockgate: {code}"
        if key is not None:
            text += f" ({key!r})"
        if message:
            text += f": {message}"
        super().__init__(text)


class HeldError(LockgateError):
    """A try-acquire found the key held. ``owner``, ``fencing_token`` and
    ``expires_in`` (seconds) name the holder where the gateway knows it."""

    def __init__(self, message: str = "", key: Optional[str] = None, owner: Optional[str] = None,
                 fencing_token: Optional[int] = None, expires_in: Optional[float] = None) -> None:
        super().__init__("held", message, key)
        self.owner = owner
        self.fencing_token = fencing_token
        self.expires_in = expires_in


class NotHeldError(LockgateError):
    """Renew or release of a lease that expired, was released or was granted
    to someone else: stop acting as the holder."""

    def __init__(self, message: str = "", key: Optional[str] = None) -> None:
        super().__init__("not_held", message, key)


class NotFoundError(LockgateError):
    """Inspect of a key nobody holds."""

    def __init__(self, message: str = "", key: Optional[str] = None) -> None:
        super().__init__("not_found", message, key)


class NotLeaderError(LockgateError):
    """The gateway is not the leader and the client gave up following it."""

    def __init__(self, message: str = "", key: Optional[str] = None, leader_id: str = "",
                 leader_addr: str = "") -> None:
        super().__init__("not_leader", message, key)
        self.leader_id = leader_id
        self.leader_addr = leader_addr


class UnavailableError(LockgateError):
    """No gateway could serve the request in time (``unavailable``,
    ``closed``, ``too_many_waiters``, or no answer): the outcome of a write is
    unknown."""


class ClosedError(LockgateError):
    """The client was closed."""

    def __init__(self, message: str = "the client is closed", key: Optional[str] = None) -> None:
        super().__init__("client_closed", message, key)


class LockTimeoutError(LockgateError, builtins.TimeoutError):
    """An acquire's ``wait`` ran out before the key was granted (code
    ``timeout``). It is also a builtin ``TimeoutError``."""

    def __init__(self, message: str = "", key: Optional[str] = None) -> None:
        super().__init__("timeout", message, key)


class ValidationError(LockgateError, ValueError):
    """Bad input, found by the client or the gateway: ``code`` is
    ``invalid_key``, ``invalid_ttl``, ``invalid_value``, ``invalid_owner``,
    ``invalid_handle``, ``missing_field``, ``bad_json``, ``too_large``, …"""


class UnauthorizedError(LockgateError):
    """The gateway refused the bearer token (or its absence)."""

    def __init__(self, message: str = "the gateway refused the bearer token (HTTP 401)", key: Optional[str] = None) -> None:
        super().__init__("unauthorized", message, key)


class UnsupportedError(LockgateError):
    """The gateway's backend does not offer a feature the call needs:
    ``feature`` is ``shared``, ``semaphore``, ``lockdelay``, ``multikey`` or
    ``watch``. The client raises it itself, before sending, when the
    gateway did not announce the feature (``Lockgate-Features``)."""

    def __init__(self, message: str = "", key: Optional[str] = None, feature: str = "") -> None:
        super().__init__("unsupported", message, key)
        self.feature = feature


class DelayedError(LockgateError):
    """A try-acquire found the key free but in its lock-delay; ``retry_in``
    (seconds) says about how long is left."""

    def __init__(self, message: str = "", key: Optional[str] = None, retry_in: float = 0.0) -> None:
        super().__init__("delayed", message, key)
        self.retry_in = retry_in


class PermitsMismatchError(LockgateError):
    """A semaphore acquire asked for another number of permits than the
    key's holders hold it with (or the key is a read lock)."""

    def __init__(self, message: str = "", key: Optional[str] = None) -> None:
        super().__init__("permits_mismatch", message, key)


class WatchOverflowError(LockgateError):
    """A watch fell behind the key's changes and was ended: watch again."""

    def __init__(self, message: str = "", key: Optional[str] = None) -> None:
        super().__init__("watch_overflow", message, key)


class SessionExpiredError(LockgateError):
    """The session is gone (it expired, or was closed): a keep-alive, a
    close or an acquire in it was refused (code ``session_expired``). Every
    lease of the session has ended (``lost_reason`` "not_held")."""

    def __init__(self, message: str = "", key: Optional[str] = None) -> None:
        super().__init__("session_expired", message, key)


class ForbiddenError(LockgateError):
    """The caller's identity may not do this (on this key): the gateway's
    policy, or an admin action with a client's credential (code
    ``forbidden``)."""

    def __init__(self, message: str = "", key: Optional[str] = None) -> None:
        super().__init__("forbidden", message, key)


class QuotaExceededError(LockgateError):
    """The caller's identity holds as many of something as its quota allows
    (code ``quota_exceeded``); ``quota`` names which: ``"sessions"``,
    ``"leases"``, ``"waiters"`` or ``"watches"`` ("" when the gateway did not
    say). Other identities are not affected: release or close something
    first. A refused open of the client's own session never fails an
    acquire (``Client(sessions=…)``)."""

    def __init__(self, message: str = "", key: Optional[str] = None, quota: str = "") -> None:
        super().__init__("quota_exceeded", message, key)
        self.quota = quota
        if quota:
            self.args = (f"{self.args[0]} (quota {quota!r})",)


class RateLimitedError(LockgateError):
    """The caller's identity sent requests faster than its rate allows, and
    this one was not carried out (code ``rate_limited``): retry after
    ``retry_in`` seconds (0.0: the gateway did not say; back off).
    ``retryable`` is True. A waiting acquire waits it out and tries again
    by itself (within its ``wait``); a try-acquire raises it. Keep-alives
    and renewals are never rate-limited."""

    retryable = True

    def __init__(self, message: str = "", key: Optional[str] = None, retry_in: float = 0.0) -> None:
        super().__init__("rate_limited", message, key)
        self.retry_in = retry_in


_VALIDATION = {
    "bad_json", "unknown_command", "missing_field", "invalid_key", "invalid_ttl", "invalid_value",
    "invalid_owner", "invalid_handle", "invalid_wait", "too_large",
    "invalid_mode", "invalid_permits", "invalid_lock_delay", "invalid_keys", "duplicate_id",
}
_UNAVAILABLE = {"unavailable", "closed", "too_many_waiters", "too_many_locks"}


def error_from_reply(err: Any, key: Optional[str] = None) -> LockgateError:
    """The exception for the ``error`` object of an error reply."""
    from ._wire import parse_token  # a cycle otherwise: _wire raises ValidationError

    if not isinstance(err, dict):
        return LockgateError("internal", "error reply without an error object", key)
    code = str(err.get("code") or "internal")
    msg = str(err.get("message") or "")
    if code == "held":
        h = err.get("holder") if isinstance(err.get("holder"), dict) else {}
        exp = h.get("expiresIn")
        return HeldError(msg, key, owner=h.get("owner"), fencing_token=parse_token(h.get("fencingToken")),
                         expires_in=exp / 1000.0 if isinstance(exp, (int, float)) else None)
    if code == "not_held":
        return NotHeldError(msg, key)
    if code == "not_found":
        return NotFoundError(msg, key)
    if code == "not_leader":
        ld = err.get("leader") if isinstance(err.get("leader"), dict) else {}
        return NotLeaderError(msg, key, str(ld.get("id") or ""), str(ld.get("addr") or ""))
    if code == "timeout":
        return LockTimeoutError(msg, key)
    if code == "unauthorized":
        return UnauthorizedError(msg, key)
    if code == "unsupported":
        return UnsupportedError(msg, key, str(err.get("feature") or ""))
    if code == "delayed":
        r = err.get("retryIn")
        return DelayedError(msg, key, r / 1000.0 if isinstance(r, (int, float)) else 0.0)
    if code == "permits_mismatch":
        return PermitsMismatchError(msg, key)
    if code == "watch_overflow":
        return WatchOverflowError(msg, key)
    if code == "session_expired":
        return SessionExpiredError(msg, key)
    if code == "forbidden":
        return ForbiddenError(msg, key)
    if code == "quota_exceeded":
        q = err.get("quota")
        return QuotaExceededError(msg, key, q if isinstance(q, str) else "")
    if code == "rate_limited":
        r = err.get("retryIn")
        return RateLimitedError(msg, key, r / 1000.0 if isinstance(r, (int, float)) and not isinstance(r, bool) and r > 0 else 0.0)
    if code in _VALIDATION:
        return ValidationError(code, msg, key)
    if code in _UNAVAILABLE:
        return UnavailableError(code, msg, key)
    return LockgateError(code, msg, key)
