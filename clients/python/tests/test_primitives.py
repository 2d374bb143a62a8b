"""The primitives beyond the mutex against scripted fake gateways: the frames of
mode/permits/lockDelayMs, acquire_all and watch as docs/protocol.md and
gateway/primitives_test.go show them; features from Lockgate-Features and
unsupported refused before sending; the new codes as typed errors; the lease
cache keeping only plain leases; election.observe re-watching without
repeating a leader."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import unittest
from typing import Any, Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import lockgate  # noqa: E402
from lockgate import election  # noqa: E402
from test_fake import STEP, Fake, cmd  # noqa: E402

ALL = "wanted,shared,semaphore,multikey,watch,lockdelay"


def tok(key: str, value: int) -> Dict[str, Any]:
    return {"key": key, "value": value}


async def reply(ws: Any, req: Dict[str, Any], **r: Any) -> None:
    await ws.send(json.dumps({"id": req["id"], "success": r.get("type") != "error", **r}))


async def granting(f: Fake, ws: Any, req: Dict[str, Any]) -> None:
    t = req["commandType"]
    extra = {k: req[k] for k in ("mode", "permits") if k in req}
    if t in (1, 5):
        await reply(ws, req, type="grant", key=req["key"], fencingToken=tok(req["key"], 7), lockToken=req["lockToken"],
                    ttl=req["ttl"], owner=req["clientId"], **extra)
    elif t in (7, 8):
        await reply(ws, req, type="grants", leases=[
            {"key": k, "fencingToken": tok(k, 10 + i), "lockToken": req["lockToken"], "ttl": req["ttl"],
             "owner": req["clientId"], **extra} for i, k in enumerate(req["keys"])])
    elif t == 2:
        await reply(ws, req, type="released", key=req["key"])
    elif t == 3:
        await reply(ws, req, type="renewed", key=req["key"], fencingToken=req["fencingToken"], ttl=req["ttl"])


def stripped(r: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in r.items() if k not in ("id", "lockToken", "_conn")}


class TestPrimitives(unittest.IsolatedAsyncioTestCase):
    async def test_unsupported_refused_before_sending(self) -> None:
        async with Fake(granting, features="wanted,shared") as gw, lockgate.Client([gw.addr]) as c:
            self.assertEqual(await c.features(), ["wanted", "shared"])
            calls = [
                ("semaphore", lambda: c.try_acquire("k", ttl=1, permits=2)),
                ("semaphore", lambda: c.acquire("k", ttl=1, mode="shared", permits=2)),
                ("lockdelay", lambda: c.acquire("k", ttl=1, lock_delay=0.1)),
                ("multikey", lambda: c.try_acquire_all(["a", "b"], ttl=1)),
                ("multikey", lambda: c.acquire_all(["a"], ttl=1, mode="shared")),
                ("watch", lambda: c.watch("k").start()),
            ]
            for feature, call in calls:
                with self.assertRaises(lockgate.UnsupportedError, msg=feature) as cm:
                    await asyncio.wait_for(call(), STEP)
                self.assertEqual((cm.exception.code, cm.exception.feature), ("unsupported", feature))
            self.assertEqual(gw.requests, [])
            lease = await c.try_acquire("k", ttl=1, mode="shared")
            self.assertEqual(lease.mode, "shared")
            self.assertEqual(len(gw.requests), 1)

    async def test_acquire_frames(self) -> None:
        async with Fake(granting, features=ALL) as gw, lockgate.Client([gw.addr], client_id="me") as c:
            plain = await c.try_acquire("p", ttl=1)
            shared = await c.acquire("s", ttl=1, mode="shared")
            sem = await c.try_acquire("m", ttl=1, permits=3)
            delayed = await c.acquire("d", ttl=1, lock_delay=0.25, mode="exclusive")
            self.assertEqual([stripped(r) for r in gw.requests], [
                {"commandType": 5, "key": "p", "clientId": "me", "ttl": 1000},
                {"commandType": 1, "key": "s", "clientId": "me", "ttl": 1000, "mode": "shared"},
                {"commandType": 5, "key": "m", "clientId": "me", "ttl": 1000, "mode": "shared", "permits": 3},
                {"commandType": 1, "key": "d", "clientId": "me", "ttl": 1000, "lockDelayMs": 250},
            ])
            self.assertEqual((plain.mode, plain.permits), ("exclusive", 0))
            self.assertEqual((shared.mode, shared.permits), ("shared", 0))
            self.assertEqual((sem.mode, sem.permits), ("shared", 3))
            self.assertEqual(delayed.mode, "exclusive")
            for kw, code in (({"mode": "read"}, "invalid_mode"), ({"permits": -1}, "invalid_permits"),
                             ({"permits": 65537}, "invalid_permits"), ({"lock_delay": 60.001}, "invalid_lock_delay")):
                with self.assertRaises(lockgate.ValidationError) as cm:
                    await c.try_acquire("x", ttl=1, **kw)
                self.assertEqual(cm.exception.code, code)

    async def test_acquire_all(self) -> None:
        async with Fake(granting, features=ALL) as gw, lockgate.Client([gw.addr], client_id="me") as c:
            leases = await c.acquire_all(["m/b", "m/a"], ttl=2, mode="shared", wait=0.5)
            sent = gw.requests[0]
            self.assertEqual((sent["commandType"], sent["keys"], sent.get("key"), sent["mode"]), (7, ["m/b", "m/a"], None, "shared"))
            self.assertTrue(0 < sent["waitMs"] <= 500, sent["waitMs"])  # what is left of the wait when sent
            self.assertEqual([(l.key, l.fencing_token, l.mode) for l in leases], [("m/b", 10, "shared"), ("m/a", 11, "shared")])
            t = await c.try_acquire_all(["x"], ttl=2)
            self.assertEqual((gw.requests[1]["commandType"], t[0].key), (8, "x"))
            # Both leases share the lock token (as raftlock's do): each releases its own key.
            await leases[1].release()
            self.assertFalse(leases[0].lost.is_set())
            await leases[0].release()
            self.assertEqual([r["key"] for r in gw.requests if r["commandType"] == 2], ["m/a", "m/b"])
            for keys in ([], ["a", "a"], [f"k{i}" for i in range(65)]):
                with self.assertRaises(lockgate.ValidationError) as cm:
                    await c.try_acquire_all(keys, ttl=1)
                self.assertEqual(cm.exception.code, "invalid_keys")
            with self.assertRaises(lockgate.ValidationError) as cm:
                await c.try_acquire_all(["a", ""], ttl=1)
            self.assertEqual(cm.exception.code, "invalid_key")

    async def test_mismatched_grants_given_back(self) -> None:
        async def bad(f: Fake, ws: Any, req: Dict[str, Any]) -> None:
            if req["commandType"] == 8:
                k = req["keys"][0]
                await reply(ws, req, type="grants", leases=[
                    {"key": k, "fencingToken": tok(k, 3), "lockToken": req["lockToken"], "ttl": req["ttl"]},
                    {"key": "other", "fencingToken": tok("other", 4), "lockToken": req["lockToken"], "ttl": req["ttl"]}])
            else:
                await granting(f, ws, req)
        async with Fake(bad, features=ALL) as gw, lockgate.Client([gw.addr]) as c:
            with self.assertRaises(lockgate.UnavailableError):
                await c.try_acquire_all(["a", "b"], ttl=1)
            rel = await gw.wait_for(cmd(2), 2)
            self.assertEqual([(r["key"], r["fencingToken"]["value"]) for r in rel], [("a", 3), ("other", 4)])

    async def test_new_codes_are_typed(self) -> None:
        answers = [{"code": "delayed", "message": "m", "retryIn": 1234},
                   {"code": "permits_mismatch", "message": "m"},
                   {"code": "unsupported", "message": "m", "feature": "semaphore"},
                   {"code": "invalid_keys", "message": "m"}]

        async def errs(f: Fake, ws: Any, req: Dict[str, Any]) -> None:
            await reply(ws, req, type="error", error=answers.pop(0))
        async with Fake(errs, features=ALL) as gw, lockgate.Client([gw.addr]) as c:
            with self.assertRaises(lockgate.DelayedError) as d:
                await c.try_acquire("k", ttl=1)
            self.assertEqual(d.exception.retry_in, 1.234)
            with self.assertRaises(lockgate.PermitsMismatchError):
                await c.try_acquire("k", ttl=1, permits=3)
            with self.assertRaises(lockgate.UnsupportedError) as u:
                await c.try_acquire("k", ttl=1, permits=3)
            self.assertEqual(u.exception.feature, "semaphore")
            with self.assertRaises(lockgate.ValidationError) as v:
                await c.try_acquire_all(["a"], ttl=1)
            self.assertEqual(v.exception.code, "invalid_keys")

    async def test_watch_events_and_unwatch(self) -> None:
        async def events(f: Fake, ws: Any, req: Dict[str, Any]) -> None:
            if req["commandType"] != 9:
                return
            k = req["key"]
            for e in ({"event": "holder", "owner": "a", "fencingToken": tok(k, 5), "value": "v1", "revision": 10},
                      {"event": "synced", "revision": 10},
                      {"event": "released", "owner": "a", "fencingToken": tok(k, 5), "revision": 11},
                      {"event": "granted", "owner": "b", "fencingToken": tok(k, 6), "mode": "shared", "permits": 2, "revision": 12},
                      {"event": "expired", "owner": "b", "fencingToken": tok(k, 6), "mode": "shared", "permits": 2, "revision": 13}):
                await reply(ws, req, type="event", key=k, **e)
        async with Fake(events, features=ALL) as gw, lockgate.Client([gw.addr]) as c:
            got = []
            async with c.watch("wk") as w:
                async for ev in w:
                    got.append((ev.type, ev.owner, ev.fencing_token, ev.value, ev.mode, ev.permits, ev.revision))
                    if len(got) == 5:
                        break
            self.assertEqual(got, [
                ("holder", "a", 5, "v1", "exclusive", 0, 10),
                ("synced", "", None, None, "exclusive", 0, 10),
                ("released", "a", 5, None, "exclusive", 0, 11),
                ("granted", "b", 6, None, "shared", 2, 12),
                ("expired", "b", 6, None, "shared", 2, 13),
            ])
            watch, = await gw.wait_for(cmd(9))
            self.assertEqual(watch["key"], "wk")
            unwatch, = await gw.wait_for(cmd(10))
            self.assertEqual(unwatch["target"], watch["id"])
            self.assertIsNone(await w.next())

    async def test_watch_ends_with_overflow_or_connection_loss(self) -> None:
        async def script(f: Fake, ws: Any, req: Dict[str, Any]) -> None:
            if req["commandType"] != 9:
                return
            await reply(ws, req, type="event", key=req["key"], event="synced")
            if req["key"] == "over":
                await reply(ws, req, type="event", key=req["key"], event="error",
                            error={"code": "watch_overflow", "message": "fell behind"})
            elif req["key"] == "lost":
                await asyncio.sleep(0.02)
                ws.transport.abort()
            else:
                for i in range(1100):
                    await reply(ws, req, type="event", key=req["key"], event="granted", fencingToken=tok(req["key"], i + 1))
        async with Fake(script, features=ALL) as gw, lockgate.Client([gw.addr]) as c:
            over = await c.watch("over")
            self.assertEqual((await over.next()).type, "synced")
            with self.assertRaises(lockgate.WatchOverflowError):
                await over.next()
            busy = await c.watch("busy")  # never read: the client's buffer overflows
            await gw.wait_for(cmd(10))
            with self.assertRaises(lockgate.WatchOverflowError):
                while True:
                    await busy.next()
            lost = await c.watch("lost")
            self.assertEqual((await lost.next()).type, "synced")
            with self.assertRaises(lockgate.UnavailableError):
                await asyncio.wait_for(lost.next(), STEP)

    async def test_cache_keeps_only_plain_leases(self) -> None:
        async with Fake(granting, features=ALL) as gw, lockgate.Client([gw.addr], cache_leases=True) as c:
            plain = await c.acquire("k", ttl=5)
            await plain.release()
            self.assertEqual(c.cache_stats().kept, 1)
            self.assertEqual([r for r in gw.requests if r["commandType"] == 2], [])
            shared = await c.acquire("k", ttl=5, mode="shared")  # gives the kept lease up first
            rel = [r for r in gw.requests if r["commandType"] == 2]
            self.assertEqual([r["lockToken"] for r in rel], [plain.lock_token])
            await shared.release()
            for kw in ({"permits": 2}, {"lock_delay": 0.1}):
                lease = await c.acquire("j", ttl=5, **kw)
                await lease.release()
                self.assertEqual(lease.lost_reason, "released")
            for lease in await c.acquire_all(["x", "y"], ttl=5):
                await lease.release()
            self.assertEqual(len([r for r in gw.requests if r["commandType"] == 2]), 6)
            self.assertEqual(c.cache_stats().kept, 1)

    async def test_observe_rewatches_without_repeating(self) -> None:
        watches: List[int] = []

        async def script(f: Fake, ws: Any, req: Dict[str, Any]) -> None:
            if req["commandType"] == 4:
                await reply(ws, req, type="error", error={"code": "not_found", "message": "nobody"})
                return
            if req["commandType"] != 9:
                return
            k = req["key"]
            watches.append(1)
            if len(watches) == 1:
                evs = [{"event": "holder", "owner": "a", "value": "A", "fencingToken": tok(k, 5)}, {"event": "synced"},
                       {"event": "released", "owner": "a", "fencingToken": tok(k, 5)},
                       {"event": "granted", "owner": "b", "value": "B", "fencingToken": tok(k, 6)}]
            else:  # the re-watch finds b still leading: not reported again
                evs = [{"event": "holder", "owner": "b", "value": "B", "fencingToken": tok(k, 6)}, {"event": "synced"},
                       {"event": "expired", "owner": "b", "fencingToken": tok(k, 6)},
                       {"event": "granted", "owner": "c", "value": "C", "fencingToken": tok(k, 8)}]
            for e in evs:
                await reply(ws, req, type="event", key=k, **e)
            if len(watches) == 1:
                await asyncio.sleep(0.02)
                ws.transport.abort()
        async with Fake(script, features=ALL) as gw, lockgate.Client([gw.addr]) as c:
            self.assertFalse((await election.current(c, "e")).present)
            seen = []
            async with contextlib.aclosing(election.observe(c, "e")) as leaders:
                async for ld in leaders:
                    seen.append(f"{ld.value}/{ld.fencing_token}" if ld.present else "none")
                    if len(seen) == 5:
                        break
            self.assertEqual(seen, ["A/5", "none", "B/6", "none", "C/8"])
            self.assertEqual(len(watches), 2)
            del gw

    async def test_cancelled_acquire_all_releases_raced_grants(self) -> None:
        async def script(f: Fake, ws: Any, req: Dict[str, Any]) -> None:
            if req["commandType"] == 7:
                return  # queued
            if req["commandType"] == 6:
                target = next(r for r in f.requests if r.get("id") == req["target"])
                await ws.send(json.dumps({"id": req["target"], "type": "grants", "success": True, "leases": [
                    {"key": k, "fencingToken": tok(k, 20 + i), "lockToken": target["lockToken"], "ttl": target["ttl"]}
                    for i, k in enumerate(target["keys"])]}))
                return
            await granting(f, ws, req)
        async with Fake(script, features=ALL) as gw, lockgate.Client([gw.addr]) as c:
            t = asyncio.ensure_future(c.acquire_all(["a", "b"], ttl=5))
            acquire, = await gw.wait_for(cmd(7))
            t.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await t
            cancel, = await gw.wait_for(cmd(6))
            self.assertEqual(cancel["target"], acquire["id"])
            rel = await gw.wait_for(cmd(2), 2)
            self.assertEqual([(r["key"], r["lockToken"], r["fencingToken"]["value"]) for r in rel],
                             [("a", acquire["lockToken"], 20), ("b", acquire["lockToken"], 21)])


if __name__ == "__main__":
    unittest.main()
