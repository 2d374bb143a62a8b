"""Sessions against scripted fake gateways: the client's own
session (one openSession, acquires naming it, one keep-alive for every lease
and no per-lease renewal), the deadline rule (sent of the last open/renew +
ttl − drift), a refused keep-alive and a passed deadline ending every lease,
the keep-alive across a dropped connection and a leader change, opting out,
the explicit API (open, renew, close, acquire in a session) and close."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import unittest
from typing import Any, Callable, Dict, List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import lockgate  # noqa: E402
from lockgate._wire import deadline  # noqa: E402
from test_fake import STEP, Fake, cmd  # noqa: E402

Script = Callable[[Fake, Any, Dict[str, Any]], Any]


def reply(ws: Any, req: Dict[str, Any], **body: Any) -> Any:
    return ws.send(json.dumps({"id": req["id"], "success": body.get("type") != "error", **body}))


def error(ws: Any, req: Dict[str, Any], code: str, message: str = "") -> Any:
    return reply(ws, req, type="error", error={"code": code, "message": message})


class SessionGateway(Fake):
    """A fake gateway that offers sessions: it opens, renews and closes
    sessions and grants every acquire (in the session named). ``on_renew``,
    ``on_acquire`` and ``on_open`` may answer instead (returning True)."""

    def __init__(self, features: str = "wanted,multikey,sessions",
                 on_renew: Optional[Callable[..., Any]] = None, on_acquire: Optional[Callable[..., Any]] = None,
                 on_open: Optional[Callable[..., Any]] = None) -> None:
        super().__init__(self._answer, features=features)
        self.on_renew = on_renew
        self.on_acquire = on_acquire
        self.on_open = on_open
        self.at: Dict[str, float] = {}  # time.monotonic() each request arrived, by id
        self.sessions: List[str] = []
        self.token = 0

    def of(self, t: int) -> List[Dict[str, Any]]:
        return [r for r in self.requests if r.get("commandType") == t]

    async def _answer(self, f: Fake, ws: Any, req: Dict[str, Any]) -> None:
        self.at[req["id"]] = time.monotonic()
        t = req["commandType"]
        if t == 11:
            if self.on_open is not None and await self.on_open(ws, req):
                return
            sid = ("%02d" % (len(self.sessions) + 1)).ljust(32, "a")
            self.sessions.append(sid)
            await reply(ws, req, type="session", sessionId=sid, ttl=req.get("ttl") or 20000)
        elif t == 12:
            if self.on_renew is not None and await self.on_renew(ws, req):
                return
            await reply(ws, req, type="sessionRenewed", sessionId=req["sessionId"], ttl=1)
        elif t == 13:
            await reply(ws, req, type="sessionClosed", sessionId=req["sessionId"])
        elif t in (1, 5, 7, 8):
            if self.on_acquire is not None and await self.on_acquire(ws, req):
                return
            self.token += 1
            extra = {"sessionId": req["sessionId"]} if "sessionId" in req else {}
            keys = req["keys"] if t in (7, 8) else [req["key"]]
            leases = [dict(key=k, fencingToken={"key": k, "value": self.token}, lockToken=req["lockToken"],
                           ttl=req.get("ttl") or 20000, owner=req.get("clientId", ""), **extra) for k in keys]
            if t in (7, 8):
                await reply(ws, req, type="grants", leases=leases)
            else:
                await reply(ws, req, type="grant", **leases[0])
        elif t == 2:
            await reply(ws, req, type="released", key=req["key"])
        elif t == 3:
            await reply(ws, req, type="renewed", key=req["key"], fencingToken=req["fencingToken"], ttl=req["ttl"])


async def lost(*leases: lockgate.Lease) -> List[Optional[str]]:
    await asyncio.wait_for(asyncio.gather(*(lease.lost.wait() for lease in leases)), STEP)
    return [lease.lost_reason for lease in leases]


class TestSessions(unittest.IsolatedAsyncioTestCase):
    async def test_own_session_one_keep_alive_for_every_lease(self) -> None:
        async with SessionGateway() as gw, lockgate.Client([gw.addr], session_ttl=0.3) as c:
            leases = [await c.acquire(k) for k in ("a", "b", "c")]
            leases += await c.acquire_all(["d", "e"])
            self.assertEqual(len(gw.of(11)), 1, "one session for every lease")
            self.assertEqual((gw.of(11)[0]["ttl"], gw.of(11)[0]["clientId"]), (300, c.client_id))
            s = c.session
            self.assertIsInstance(s, lockgate.Session)
            self.assertEqual(s.id, gw.sessions[0])
            for r in gw.of(1) + gw.of(7):
                self.assertEqual(r["sessionId"], s.id)
                self.assertNotIn("ttl", r, "a session lease takes the session's TTL")
            for lease in leases:
                self.assertIs(lease.session, s)
                self.assertIsNone(lease._keepalive, "a session lease does not renew itself")
                self.assertEqual(lease.deadline, s.deadline)
            self.assertEqual(s.leases, 5)
            before = s.deadline
            await gw.wait_for(cmd(12), 3)  # three keep-alives, at ttl/3 each
            await asyncio.sleep(0.02)
            self.assertEqual(gw.of(3), [], "no lease renewed itself")
            self.assertTrue(all(r["sessionId"] == s.id for r in gw.of(12)))
            self.assertTrue(all(r["ttl"] == 300 for r in gw.of(12)), "the session's TTL, for a gateway that has not seen it")
            self.assertGreater(s.deadline, before)
            for lease in leases:
                self.assertEqual(lease.deadline, s.deadline, "every lease follows its session")
                self.assertTrue(lease.held)
            await leases[0].release()
            self.assertEqual(s.leases, 4, "a released lease leaves its session")

    async def test_deadline_rule(self) -> None:
        async def slow(ws: Any, req: Dict[str, Any]) -> bool:
            async def later() -> None:
                await asyncio.sleep(0.15)
                await reply(ws, req, type="sessionRenewed", sessionId=req["sessionId"], ttl=600)
            asyncio.ensure_future(later())
            return True
        async with SessionGateway(on_renew=slow) as gw, lockgate.Client([gw.addr]) as c:
            s = await c.open_session(0.6, keep_alive=False)
            self.assertFalse(s.keep_alive)
            opened = gw.of(11)[0]
            self.assertLessEqual(s.sent, gw.at[opened["id"]], "the session counts from the open's send")
            self.assertEqual(s.deadline, deadline(s.sent, 0.6))
            lease = await c.acquire("k", session=s)
            acquired = time.monotonic()
            self.assertEqual(lease.deadline, s.deadline, "acquiring in a session does not move its deadline")
            self.assertLess(lease.deadline, acquired + 0.6 - 0.008, "nor does the lease count from its acquire")
            before = time.monotonic()
            await lease.renew()  # a session lease's renew is its session's keep-alive
            self.assertEqual(gw.of(3), [])
            got = gw.at[gw.of(12)[0]["id"]]
            self.assertTrue(before <= s.sent <= got, "the keep-alive's send time, before the gateway saw it")
            self.assertEqual(s.deadline, deadline(s.sent, 0.6))
            self.assertLess(s.deadline, got + 0.6 - 0.008, "the answer came 150 ms later, and does not count")
            self.assertEqual((lease.deadline, s.renewals), (s.deadline, 1))
            with self.assertRaises(lockgate.ValidationError):
                await lease.renew(5)

    async def test_refused_keep_alive_ends_every_lease_then_a_new_session(self) -> None:
        refuse = [True]

        async def renew(ws: Any, req: Dict[str, Any]) -> bool:
            if refuse[0]:
                await error(ws, req, "session_expired", "no such session")
                return True
            return False
        async with SessionGateway(on_renew=renew) as gw, lockgate.Client([gw.addr], session_ttl=0.3) as c:
            leases = [await c.acquire("a"), await c.acquire("b")]
            s = c.session
            self.assertEqual(await lost(*leases), ["not_held", "not_held"])
            self.assertEqual(s.end_reason, "not_held")
            self.assertIsNone(c.session)
            refuse[0] = False
            lease = await c.acquire("c")
            self.assertEqual(len(gw.of(11)), 2, "a new session")
            self.assertIsNot(lease.session, s)
            self.assertEqual(gw.of(1)[-1]["sessionId"], gw.sessions[1])

    async def test_unanswered_keep_alives_end_the_session_at_its_deadline(self) -> None:
        async def never(ws: Any, req: Dict[str, Any]) -> bool:
            return True
        async with SessionGateway(on_renew=never) as gw, lockgate.Client([gw.addr], session_ttl=0.3) as c:
            leases = [await c.acquire(k) for k in ("a", "b", "c")]
            dl = leases[0].deadline
            self.assertEqual(await lost(*leases), ["expired"] * 3)
            self.assertGreaterEqual(time.monotonic(), dl, "no lease ended before its deadline")
            self.assertGreaterEqual(len(gw.of(12)), 1, "the keep-alive was tried")

    async def test_keep_alive_across_a_drop_and_a_leader_change(self) -> None:
        async with SessionGateway() as leader:
            n = [0]

            async def redirect(ws: Any, req: Dict[str, Any]) -> bool:
                n[0] += 1
                if n[0] == 1:
                    ws.transport.abort()
                    return True
                await ws.send(json.dumps({"id": req["id"], "type": "error", "success": False, "error": {
                    "code": "not_leader", "message": "moved", "leader": {"id": "2", "addr": leader.addr}}}))
                return True
            async with SessionGateway(on_renew=redirect) as first, lockgate.Client([first.addr], session_ttl=0.6) as c:
                lease = await c.acquire("k")
                s = lease.session
                got, = await leader.wait_for(cmd(12))
                self.assertEqual(n[0], 2, "dropped once, then redirected")
                self.assertEqual([r["_conn"] for r in first.of(12)], [1, 2])
                self.assertEqual(got["sessionId"], s.id)
                await asyncio.sleep(0.02)
                self.assertEqual(s.renewals, 1)
                self.assertIsNone(lease.lost_reason)
                self.assertTrue(lease.held)

    async def test_opting_out(self) -> None:
        async with SessionGateway() as gw, SessionGateway(features="wanted") as old:
            async with lockgate.Client([gw.addr], sessions=False) as off:
                a = await off.acquire("a")
                self.assertIsNone(a.session)
                self.assertIsNotNone(a._keepalive, "it renews itself")
            async with lockgate.Client([gw.addr]) as c:
                b = await c.acquire("b", ttl=5, auto_renew=True)
                d = await c.acquire("d", session=False)
                e = await c.acquire("e", auto_renew=False)
                for lease in (b, d, e):
                    self.assertIsNone(lease.session)
                self.assertEqual(gw.of(11), [], "no session opened")
                self.assertTrue(all("sessionId" not in r for r in gw.of(1)))
            async with lockgate.Client([old.addr]) as o:
                x = await o.acquire("x")
                self.assertIsNone(x.session)
                self.assertIsNotNone(x._keepalive)
                self.assertEqual(old.of(11), [], "nothing sent for a feature the gateway did not announce")
                with self.assertRaises(lockgate.UnsupportedError):
                    await o.open_session()

    async def test_explicit_sessions(self) -> None:
        expired = [False]

        async def acquire(ws: Any, req: Dict[str, Any]) -> bool:
            if expired[0]:
                await error(ws, req, "session_expired", "gone")
                return True
            return False
        async with SessionGateway(on_acquire=acquire) as gw, lockgate.Client([gw.addr]) as c:
            s = await c.open_session(5, client_id="svc-1")
            self.assertEqual(gw.of(11)[0]["clientId"], "svc-1")
            x = await c.acquire("x", session=s)
            y = await c.try_acquire("y", session=s, ttl=5)
            with self.assertRaises(lockgate.ValidationError):
                await c.acquire("z", session=s, ttl=1)
            self.assertIsNone(c.session, "an explicit session is not the client's own")
            await c.close_session(s)
            self.assertEqual(gw.of(13)[0]["sessionId"], s.id)
            self.assertEqual(await lost(x, y), ["released", "released"])
            self.assertEqual(s.end_reason, "released")
            with self.assertRaises(lockgate.SessionExpiredError):
                await c.acquire("z", session=s)

            t = await c.open_session(5)
            held = await c.acquire("w", session=t)
            expired[0] = True  # the server lost the session: an acquire in it is refused
            with self.assertRaises(lockgate.SessionExpiredError):
                await c.acquire("v", session=t)
            self.assertEqual(await lost(held), ["not_held"])

    async def test_acquire_answered_session_expired_in_the_own_session_retries_in_a_new_one(self) -> None:
        refused = [0]

        async def acquire(ws: Any, req: Dict[str, Any]) -> bool:
            if refused[0]:
                return False
            refused[0] += 1
            await error(ws, req, "session_expired", "gone")
            return True
        async with SessionGateway(on_acquire=acquire) as gw, lockgate.Client([gw.addr]) as c:
            lease = await c.acquire("k")
            self.assertEqual(len(gw.of(11)), 2)
            self.assertEqual([r["sessionId"] for r in gw.of(1)], gw.sessions)
            self.assertEqual(lease.session.id, gw.sessions[1])

    async def test_own_session_replaced_once_and_none_with_the_cache(self) -> None:
        async def acquire(ws: Any, req: Dict[str, Any]) -> bool:
            if "sessionId" not in req:
                return False
            await error(ws, req, "session_expired", "gone")
            return True
        async with SessionGateway(on_acquire=acquire) as gw:
            async with lockgate.Client([gw.addr]) as c:
                with self.assertRaises(lockgate.SessionExpiredError):
                    await c.acquire("k")
                self.assertEqual(len(gw.of(11)), 2, "one new session, not one per refusal")
            async with lockgate.Client([gw.addr], cache_leases=True) as cached:
                lease = await cached.acquire("k")
                self.assertIsNone(lease.session, "as the Go SDK: the cache keeps and renews leases of its own")
                self.assertEqual(len(gw.of(11)), 2)

    async def test_close_stops_the_keep_alive(self) -> None:
        async with SessionGateway() as gw:
            c = lockgate.Client([gw.addr], session_ttl=0.3)
            lease = await c.acquire("k")
            await c.close()
            sent = len(gw.of(12))
            self.assertEqual(await lost(lease), ["expired"])
            self.assertEqual(len(gw.of(12)), sent, "no keep-alive after close")
            self.assertEqual(gw.of(13) + gw.of(2), [], "close neither closes the session nor releases")


class TestRefusals(unittest.IsolatedAsyncioTestCase):
    """What an identity's quotas and rates refuse: the client's session
    (quota_exceeded, too_many_sessions: the acquire falls back; forbidden:
    it fails) and acquires sent too fast (rate_limited)."""

    async def test_refused_session_falls_back(self) -> None:
        for code in ("quota_exceeded", "too_many_sessions"):
            with self.subTest(code=code):
                await self._refused_session_falls_back(code)

    async def _refused_session_falls_back(self, code: str) -> None:
        refuse = [True]

        async def on_open(ws: Any, req: Dict[str, Any]) -> bool:
            if not refuse[0]:
                return False
            await reply(ws, req, type="error", error={"code": code, "message": "at the quota", "quota": "sessions"})
            return True
        # A TTL of 1 s: the leases renew themselves every third of it, and
        # a loaded machine may stall this event loop for a few hundred ms.
        retry = 0.6
        async with SessionGateway(on_open=on_open) as gw, \
                lockgate.Client([gw.addr], session_ttl=1.0, session_retry=retry) as c:
            with self.assertLogs("lockgate", "WARNING") as logs:
                leases = [await c.acquire("a"), await c.try_acquire("b")] + await c.acquire_all(["c", "d"])
            warned = [m for m in logs.output if "refused the client's session" in m]
            self.assertEqual(len(warned), 1, logs.output)
            for lease in leases:
                self.assertIsNone(lease.session, "the gateway refused the session")
                self.assertIsNotNone(lease._keepalive, "it renews itself")
                self.assertEqual(lease.ttl, 1.0, "the session's TTL")
            self.assertEqual(len(gw.of(11)), 1, "not asked again within session_retry")
            self.assertTrue(all("sessionId" not in r and r["ttl"] == 1000 for r in gw.of(1) + gw.of(5) + gw.of(7)))
            self.assertEqual(c.session_stats(), lockgate.SessionStats(opened=0, refused=1, fallbacks=3, falling_back=True))

            # Each lease renews itself past its TTL.
            first = leases[0].deadline
            await gw.wait_for(cmd(3), 3 * len(leases))
            self.assertGreater(time.monotonic(), first, "three renewals of every lease take longer than its TTL")
            for lease in leases:
                self.assertTrue(lease.held, "alive past its first deadline")
                self.assertGreater(lease.deadline, first)

            # Allowed again: the first acquire after session_retry opens the session.
            refuse[0] = False
            got: Optional[lockgate.Lease] = None
            i = 0
            while got is None:
                lease = await c.acquire("again/%d" % i)
                i += 1
                if lease.session is not None:
                    got = lease
                else:
                    await asyncio.sleep(0.025)
            opens = gw.of(11)
            self.assertEqual(len(opens), 2, "the refused open and one after session_retry")
            gap = gw.at[opens[1]["id"]] - gw.at[opens[0]["id"]]
            self.assertGreaterEqual(gap, retry - 0.005, "asked again before session_retry")
            st = c.session_stats()
            self.assertEqual((st.opened, st.refused, st.falling_back), (1, 1, False))
            self.assertIs(c.session, got.session)
            self.assertTrue(all(lease.held for lease in leases), "the fallback leases go on renewing themselves")

    async def test_forbidden_session_fails_the_acquire(self) -> None:
        async def on_open(ws: Any, req: Dict[str, Any]) -> bool:
            await error(ws, req, "forbidden", "no sessions for you")
            return True
        async with SessionGateway(on_open=on_open) as gw, lockgate.Client([gw.addr]) as c:
            with self.assertRaises(lockgate.ForbiddenError):
                await c.acquire("k")
            self.assertEqual(c.session_stats(), lockgate.SessionStats())

    async def test_rate_limited(self) -> None:
        limit = [1]

        async def on_acquire(ws: Any, req: Dict[str, Any]) -> bool:
            if limit[0] <= 0:
                return False
            limit[0] -= 1
            await reply(ws, req, type="error", error={"code": "rate_limited", "message": "slow down", "retryIn": 120})
            return True
        async with SessionGateway(on_acquire=on_acquire) as gw, lockgate.Client([gw.addr], sessions=False) as c:
            with self.assertRaises(lockgate.RateLimitedError) as e:
                await c.try_acquire("k")
            self.assertEqual((e.exception.retry_in, e.exception.key), (0.12, "k"))
            limit[0] = 2
            start = time.monotonic()
            lease = await c.acquire("k")
            self.assertGreaterEqual(time.monotonic() - start, 0.24 - 0.005, "waited retryIn twice")
            sent = gw.of(1)
            self.assertEqual(len(sent), 3, "two refused, one granted")
            self.assertEqual(len({r["lockToken"] for r in sent}), 1, "the same acquire")
            self.assertTrue(lease.held)
            limit[0] = 1000
            with self.assertRaises(lockgate.LockTimeoutError):
                await c.acquire("k2", wait=0.3)


if __name__ == "__main__":
    unittest.main()
