"""Sessions on the client's side: opening, renewing and closing them, and
the client's own session, into which every auto-renewed lease goes when the
gateway offers ``sessions``.

A session lease's deadline is its session's: ``sent + ttl − (ttl/100 +
2 ms)``, ``sent`` being when the last successful openSession or renewSession
was sent. The keep-alive is the timer of ``_keepalive``, as a lease's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Dict, Optional, Union

from ._calls import _Call
from ._keepalive import keep_alive
from ._wire import CMD_CLOSE_SESSION, CMD_OPEN_SESSION, CMD_RENEW_SESSION, ms, validate_ttl
from .errors import (
    ClosedError, LockgateError, SessionExpiredError, UnavailableError, UnsupportedError, ValidationError,
    error_from_reply,
)
from .session import Session, SessionStats

if TYPE_CHECKING:  # pragma: no cover
    from ._conn import Conn

log = logging.getLogger("lockgate")

#: seconds after a refused open of the client's own session before an acquire asks for it again
DEFAULT_SESSION_RETRY = 30.0


class _Outside:
    """Marks an acquire whose lease would have gone into the client's own
    session and renews itself instead (the session was refused, or could
    not be opened)."""

    def __repr__(self) -> str:
        return "OUTSIDE"


OUTSIDE = _Outside()


class _Sessions:
    """The Client's sessions (a part of Client, which holds its state)."""

    if TYPE_CHECKING:  # pragma: no cover
        client_id: str
        _closed: bool
        _cur: Optional[Conn]
        _use_sessions: bool
        _session_ttl: Optional[float]
        _own: Optional[Session]
        _own_opening: Optional["asyncio.Future[Any]"]
        _sessions: Dict[Session, None]
        _no_sessions_on: Optional[Conn]
        _session_retry: float
        _own_retry_at: float
        _session_stats: SessionStats

        def _enter(self) -> Any: ...
        async def _timed(self, k: _Call, timeout: Optional[float] = None) -> Dict[str, Any]: ...
        @staticmethod
        def _unexpected(r: Dict[str, Any], key: str, want: str) -> LockgateError: ...

    @property
    def session(self) -> Optional[Session]:
        """The client's own session (``Client(sessions=True)``) while it lives, else None."""
        return self._own

    async def open_session(self, ttl: Optional[float] = None, client_id: Optional[str] = None, *,
                           keep_alive: bool = True) -> Session:
        """Open a session (the gateway's ``sessions``): leases acquired with
        ``session=s`` live as long as it does, all renewed by one keep-alive
        every ttl/3 (unless ``keep_alive`` is False). ``ttl`` in seconds
        (default: the client's ``session_ttl``, else the server's, 20 s);
        ``client_id`` the owner of its leases (default: the client's).
        Bounded by ``request_timeout``."""
        ttl = validate_ttl(ttl)
        if ttl is None:
            ttl = self._session_ttl
        owner = client_id or self.client_id
        with self._enter():
            req: Dict[str, Any] = {"commandType": CMD_OPEN_SESSION, "clientId": owner}
            if ttl is not None:
                req["ttl"] = ms(ttl)
            k = _Call("open-session", req, needs=["sessions"])
            r = await self._timed(k)
            if r.get("type") != "session":
                raise self._unexpected(r, None, "session")  # type: ignore[arg-type]
            sid, got = r.get("sessionId"), r.get("ttl")
            if not isinstance(sid, str) or not sid or not isinstance(got, (int, float)) or got <= 0:
                raise UnavailableError("unavailable", "open-session: a session reply without sessionId or ttl")
            # The TTL started on the server after the first copy went out;
            # never count on more than was asked for.
            sttl = got / 1000.0 if ttl is None else min(ttl, got / 1000.0)
            s = Session(self, sid, owner, sttl, k.first)
            self._sessions[s] = None
            if keep_alive and not self._closed:
                s._keepalive = self._keep_session_alive(s)
            return s

    async def renew_session(self, session: Session) -> None:
        """One keep-alive of ``session``: it and every lease in it live its
        TTL from this request. SessionExpiredError (and the session ends, its
        leases ``lost_reason`` "not_held") if the server no longer has it."""
        if session.ended.is_set():
            raise SessionExpiredError(f"renew-session: the session ended ({session.end_reason})")
        with self._enter():
            await self._renew_session(session)

    async def _renew_session(self, s: Session, timeout: Optional[float] = None) -> float:
        """One keep-alive of ``s``: the send time of the answered copy.
        SessionExpiredError (and ``s`` ends) when the server no longer has it."""
        # ttl: a gateway that has not seen the session (a new leader's) takes it as the session's.
        k = _Call("renew-session", {"commandType": CMD_RENEW_SESSION, "sessionId": s.id, "ttl": ms(s.ttl)})
        r = await self._timed(k, timeout)
        if r.get("type") == "sessionRenewed":
            s._extend(k.last)
            return k.last
        code = (r.get("error") or {}).get("code") if r.get("type") == "error" else None
        if code in ("session_expired", "not_held"):
            s._end("not_held")
            raise SessionExpiredError(f"renew-session: {code}: {(r.get('error') or {}).get('message', '')}")
        raise self._unexpected(r, None, "sessionRenewed")  # type: ignore[arg-type]

    async def close_session(self, session: Session) -> None:
        """Close ``session`` on the server: every lease in it is released
        (``lost_reason`` "released"). A session already gone raises
        SessionExpiredError, and ends here all the same. A re-sent close
        answered session_expired counts as closed when the session was alive
        by our clock as the answered copy went out (as a re-sent release)."""
        with self._enter():
            alive = [False]
            k = _Call("close-session", {"commandType": CMD_CLOSE_SESSION, "sessionId": session.id})

            def on_send(now: float) -> None:
                alive[0] = not session.ended.is_set() and now < session.deadline
            k.on_send = on_send
            r = await self._timed(k)
            if r.get("type") == "sessionClosed":
                session._end("released")
                return
            if r.get("type") == "error" and (r.get("error") or {}).get("code") == "session_expired":
                if k.prior and alive[0]:
                    session._end("released")
                    return
                session._end("not_held")
                raise SessionExpiredError(f"close-session: {(r.get('error') or {}).get('message', '')}")
            raise self._unexpected(r, None, "sessionClosed")  # type: ignore[arg-type]

    def _keep_session_alive(self, s: Session) -> "asyncio.Task[None]":
        """Renew ``s`` every ttl/3 until it ends (the keep-alive timer, as a
        lease's). A refusal ends it (and its leases) at once; transient
        failures are retried with jittered backoff (up to ttl/10) while its
        deadline allows; past it the session's timer ends it as expired."""
        async def renew(timeout: float) -> float:
            return await self._renew_session(s, timeout=timeout)
        return keep_alive(s, s.ended, renew, what="a session", loss=(SessionExpiredError,),
                          closed=lambda: self._closed)

    def _forget_session(self, s: Session) -> None:
        self._sessions.pop(s, None)
        if self._own is s:
            self._own = None

    async def _session_for(self, session: "Union[Session, bool, None]", ttl: Optional[float],
                           auto_renew: bool) -> "Union[Session, _Outside, None]":
        """The session an acquire's lease goes into: the caller's (checked),
        none (False, an explicit ttl, no auto-renewal, sessions off, a gateway
        without them), or the client's own, opened on first use; OUTSIDE
        when the lease would have gone into the client's own session but
        cannot (the gateway refused it, now or less than ``session_retry``
        ago, or opening it failed)."""
        if session is False:
            return None
        if isinstance(session, Session):
            if ttl is not None and ms(ttl) != ms(session.ttl):
                raise ValidationError("invalid_ttl", f"a lease in a session takes the session's TTL "
                                      f"({session.ttl:g} s): leave ttl None")
            if session.ended.is_set():
                raise SessionExpiredError(f"acquire in a session that ended ({session.end_reason})")
            return session
        if session is not None and session is not True:
            raise ValidationError("bad_json", f"session must be a Session, False or None, not {session!r}")
        if not self._use_sessions or ttl is not None or not auto_renew:
            return None
        own = self._own
        if own is not None and own.alive:
            return own
        wc = self._cur
        if wc is not None and not wc.closed and (wc is self._no_sessions_on or "sessions" not in wc.features):
            return None
        st = self._session_stats
        if st.falling_back and time.monotonic() < self._own_retry_at:
            st.fallbacks += 1
            return OUTSIDE
        if self._own_opening is None:
            fut = asyncio.ensure_future(self._open_own())
            self._own_opening = fut

            def done(_f: "asyncio.Future[Optional[Session]]") -> None:
                if self._own_opening is fut:
                    self._own_opening = None
            fut.add_done_callback(done)
        got = await asyncio.shield(self._own_opening)
        if got is OUTSIDE and st.falling_back:
            st.fallbacks += 1
        return got

    def _outside_ttl(self, ttl: float) -> float:
        """The TTL of a lease that would have gone into the client's session
        and renews itself: the session's when ``session_ttl`` sets one."""
        return self._session_ttl if self._session_ttl is not None else ttl

    async def _open_own(self) -> "Union[Session, _Outside, None]":
        """Open the client's own session. A gateway without sessions is
        remembered for its connection (None: the lease renews itself, as
        everywhere on that gateway). A refusal — quota_exceeded,
        too_many_sessions — starts a fallback period: acquires go without
        the session (OUTSIDE) and ask again after ``session_retry``; it is
        warned of once per period and counted. forbidden and unauthorized
        fail the acquire; any other failure but the client's close leaves it
        to a lease that renews itself (OUTSIDE)."""
        st = self._session_stats
        try:
            s = await self.open_session()
        except ClosedError:
            raise
        except UnsupportedError:
            self._no_sessions_on = self._cur
            return None
        except LockgateError as e:
            if e.code == "unknown_command":
                self._no_sessions_on = self._cur
                return None
            if e.code in ("forbidden", "unauthorized"):
                raise
            if e.code in ("quota_exceeded", "too_many_sessions"):
                st.refused += 1
                self._own_retry_at = time.monotonic() + self._session_retry
                if not st.falling_back:
                    st.falling_back = True
                    log.warning("lockgate: the gateway refused the client's session (%s); auto-renewed leases renew "
                                "themselves one by one until it opens (asked again after %g s)", e, self._session_retry)
                else:
                    log.info("lockgate: the gateway refused the client's session again: %s", e)
                return OUTSIDE
            log.warning("lockgate: opening the client's session failed; the lease renews itself: %s", e)
            return OUTSIDE
        if self._closed:
            return None
        self._own = s
        st.opened += 1
        if st.falling_back:
            log.info("lockgate: the client's session opened after refusals; auto-renewed leases go into it again")
        st.falling_back = False
        return s

    @staticmethod
    def _session_fields(req: Dict[str, Any], s: Optional[Session]) -> None:
        """Put an acquire's lease in ``s``: its id, and no ttl (the lease takes the session's)."""
        if s is not None:
            req["sessionId"] = s.id
            req.pop("ttl", None)

    def _session_gone(self, r: Dict[str, Any], s: Optional[Session], asked: "Union[Session, bool, None]",
                      key: str, before: int) -> bool:
        """An acquire answered session_expired: the session ends here too
        (its leases "not_held"); the client's own is replaced and the
        acquire tried again, once (True); a caller's session raises."""
        if s is None or r.get("type") != "error" or (r.get("error") or {}).get("code") != "session_expired":
            return False
        s._end("not_held")
        if isinstance(asked, Session) or before > 0:
            raise error_from_reply(r.get("error"), key)
        log.info("lockgate: the client's session is gone on the server; acquiring %r again in a new one", key)
        return True
