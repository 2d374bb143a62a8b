"""lockgate: an asyncio client of the lockgate lock service's WebSocket protocol (v1).

    async with lockgate.Client(["127.0.0.1:50051", "127.0.0.1:50052"]) as client:
        async with client.lock("orders/42") as lease:
            ...  # act while lease.held; send lease.fencing_token with every write
"""

from . import election
from ._cache import CacheStats
from .client import Client
from .errors import (
    ClosedError, DelayedError, ForbiddenError, HeldError, LockgateError, LockTimeoutError, NotFoundError, NotHeldError,
    NotLeaderError, PermitsMismatchError, QuotaExceededError, RateLimitedError, SessionExpiredError, UnauthorizedError,
    UnavailableError, UnsupportedError, ValidationError, WatchOverflowError,
)
from .lease import HolderInfo, Lease, LockInfo
from .session import Session, SessionStats
from .watch import Watch, WatchEvent

__version__ = "0.1.0"

__all__ = [
    "Client", "CacheStats", "Lease", "LockInfo", "LockgateError", "HeldError", "NotHeldError", "NotFoundError",
    "NotLeaderError", "UnavailableError", "ClosedError", "LockTimeoutError", "ValidationError",
    "UnauthorizedError", "UnsupportedError", "DelayedError", "PermitsMismatchError", "WatchOverflowError",
    "HolderInfo", "Watch", "WatchEvent", "election", "Session", "SessionExpiredError", "SessionStats",
    "ForbiddenError", "QuotaExceededError", "RateLimitedError",
]
