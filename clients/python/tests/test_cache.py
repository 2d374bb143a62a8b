"""The lease cache (Client(cache_leases=True)) against scripted fake gateways:
hits without a round trip, reclaim on the wanted push, idle release, a
refused renewal, no caching without the gateway's feature, close."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import unittest
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import lockgate  # noqa: E402
from test_fake import STEP, Fake, grant  # noqa: E402

ACQUIRE, RELEASE, RENEW, INSPECT, TRY_ACQUIRE = 1, 2, 3, 4, 5


class Gateway:
    """A gateway script: grants with increasing fencing tokens, releases,
    renews (refusing every renewal after ``refuse_after`` of them), and
    answers inspect (a barrier: the connection is ordered, so every request
    the client sent before it has been recorded when it is answered)."""

    def __init__(self, refuse_after: Optional[int] = None, wanted_grants: bool = False) -> None:
        self.token = 0
        self.renewals = 0
        self.refuse_after = refuse_after
        self.wanted_grants = wanted_grants

    async def __call__(self, f: Fake, ws: Any, req: Dict[str, Any]) -> None:
        t = req["commandType"]
        if t in (ACQUIRE, TRY_ACQUIRE):
            self.token += 1
            extra = {"wanted": True} if self.wanted_grants else {}
            await ws.send(grant(req, token=self.token, **extra))
        elif t == RELEASE:
            await ws.send(json.dumps({"id": req["id"], "type": "released", "success": True, "key": req["key"]}))
        elif t == RENEW:
            self.renewals += 1
            if self.refuse_after is not None and self.renewals > self.refuse_after:
                await ws.send(json.dumps({"id": req["id"], "type": "error", "success": False,
                                          "error": {"code": "not_held", "message": "expired"}}))
            else:
                await ws.send(json.dumps({"id": req["id"], "type": "renewed", "success": True, "key": req["key"],
                                          "fencingToken": req["fencingToken"], "ttl": req["ttl"]}))
        elif t == INSPECT:
            await ws.send(json.dumps({"id": req["id"], "type": "info", "success": True, "key": req["key"],
                                      "owner": "o", "fencingToken": self.token, "expiresIn": 1000, "waiters": 0}))


async def push_wanted(f: Fake, lease: lockgate.Lease) -> None:
    await f.sockets[-1].send(json.dumps({"type": "wanted", "success": True, "key": lease.key,
                                         "fencingToken": {"key": lease.key, "value": lease.fencing_token},
                                         "lockToken": lease.lock_token}))


async def sent(f: Fake, c: lockgate.Client) -> List[int]:
    """The command types the gateway has received, once every request the
    client sent so far has arrived (an inspect as a barrier, dropped from the list)."""
    n = len([r for r in f.requests if r["commandType"] == INSPECT])
    await asyncio.wait_for(c.inspect("barrier"), STEP)
    await f.wait_for(lambda r: r["commandType"] == INSPECT, n + 1)
    return [r["commandType"] for r in f.requests if r["commandType"] != INSPECT]


def releases_of(f: Fake, lease: lockgate.Lease) -> List[Dict[str, Any]]:
    return [r for r in f.requests if r["commandType"] == RELEASE and r["lockToken"] == lease.lock_token
            and r["fencingToken"]["value"] == lease.fencing_token]


class TestCache(unittest.IsolatedAsyncioTestCase):
    async def test_hit_same_lease_without_a_round_trip(self) -> None:
        async with Fake(Gateway(), features="wanted") as f, lockgate.Client([f.addr], cache_leases=True) as c:
            first = await asyncio.wait_for(c.acquire("k", ttl=5), STEP)
            self.assertTrue(c.signals_wanted)
            await first.release()
            self.assertFalse(first.lost.is_set(), "a kept lease ended")
            with self.assertRaises(lockgate.NotHeldError):
                await first.release()  # kept already
            again = await asyncio.wait_for(c.acquire("k", ttl=5), STEP)
            self.assertIs(again, first)
            self.assertEqual(again.fencing_token, first.fencing_token)
            self.assertEqual(await sent(f, c), [ACQUIRE], "the hit or the release went to the gateway")
            self.assertEqual(c.cache_stats(), lockgate.CacheStats(hits=1, misses=1, kept=1, unused=0))

            # try_acquire is served too, and a caller-given lock token only if it is the lease's.
            await again.release()
            self.assertEqual(c.cache_stats().unused, 1)
            self.assertIs(await c.try_acquire("k", ttl=5, lock_token=first.lock_token), first)
            self.assertEqual(await sent(f, c), [ACQUIRE])

            # Other options: the kept lease is released for real first, then a new grant.
            await first.release()
            other = await asyncio.wait_for(c.acquire("k", ttl=5, value="v"), STEP)
            self.assertGreater(other.fencing_token, first.fencing_token)
            self.assertEqual(first.lost_reason, "released")
            self.assertEqual(await sent(f, c), [ACQUIRE, RELEASE, ACQUIRE])
            self.assertEqual(len(releases_of(f, first)), 1)
            s = c.cache_stats()
            self.assertEqual((s.hits, s.misses, s.kept, s.unused), (2, 2, 3, 0))

    async def test_reclaim_on_wanted_push(self) -> None:
        async with Fake(Gateway(), features="wanted") as f, lockgate.Client([f.addr], cache_leases=True) as c:
            lease = await asyncio.wait_for(c.acquire("k", ttl=5), STEP)
            await lease.release()
            self.assertEqual(c.cache_stats().unused, 1)
            await push_wanted(f, lease)
            await asyncio.wait_for(lease.lost.wait(), STEP)
            self.assertEqual(lease.lost_reason, "released")
            self.assertEqual(len(releases_of(f, lease)), 1)
            s = c.cache_stats()
            self.assertEqual((s.reclaimed, s.unused), (1, 0))
            again = await asyncio.wait_for(c.acquire("k", ttl=5), STEP)
            self.assertIsNot(again, lease)
            self.assertGreater(again.fencing_token, lease.fencing_token)

    async def test_lease_in_use_is_not_released_on_wanted(self) -> None:
        async with Fake(Gateway(), features="wanted") as f, lockgate.Client([f.addr], cache_leases=True) as c:
            lease = await asyncio.wait_for(c.acquire("k", ttl=5), STEP)
            await push_wanted(f, lease)
            await asyncio.wait_for(lease.wanted.wait(), STEP)
            self.assertEqual(await sent(f, c), [ACQUIRE], "a lease in use was released on wanted")
            self.assertTrue(lease.held)
            await lease.release()  # wanted: released for real, not kept
            self.assertEqual(lease.lost_reason, "released")
            self.assertEqual(len(releases_of(f, lease)), 1)
            self.assertEqual(c.cache_stats(), lockgate.CacheStats(misses=1))

    async def test_grant_marked_wanted_is_not_kept(self) -> None:
        async with Fake(Gateway(wanted_grants=True), features="wanted") as f, \
                lockgate.Client([f.addr], cache_leases=True) as c:
            lease = await asyncio.wait_for(c.acquire("k", ttl=5), STEP)
            self.assertTrue(lease.wanted.is_set())
            await lease.release()
            self.assertEqual(lease.lost_reason, "released")
            self.assertEqual(len(releases_of(f, lease)), 1)
            self.assertEqual(c.cache_stats().kept, 0)

    async def test_idle_release(self) -> None:
        async with Fake(Gateway(), features="wanted") as f, \
                lockgate.Client([f.addr], cache_leases=True, cache_idle=0.3) as c:
            lease = await asyncio.wait_for(c.acquire("k", ttl=5), STEP)
            t0 = time.monotonic()
            await lease.release()
            await asyncio.wait_for(lease.lost.wait(), STEP)
            took = time.monotonic() - t0
            self.assertGreaterEqual(took, 0.3, "released before cache_idle")
            self.assertEqual(lease.lost_reason, "released")
            self.assertEqual(len(releases_of(f, lease)), 1)
            s = c.cache_stats()
            self.assertEqual((s.idle, s.kept, s.unused, s.reclaimed), (1, 1, 0, 0))

    async def test_unused_lease_renewed_until_refused_then_dropped(self) -> None:
        gw = Gateway(refuse_after=2)
        async with Fake(gw, features="wanted") as f, lockgate.Client([f.addr], cache_leases=True) as c:
            # No auto-renew: the cache renews it at ttl/3 while it is unused.
            lease = await asyncio.wait_for(c.acquire("k", ttl=1.5), STEP)
            await lease.release()
            await asyncio.wait_for(lease.lost.wait(), STEP)
            self.assertEqual(lease.lost_reason, "not_held", "the lease was not renewed by the cache")
            self.assertEqual(gw.renewals, 3)
            renews = [r for r in f.requests if r["commandType"] == RENEW]
            self.assertTrue(all(r["lockToken"] == lease.lock_token and r["ttl"] == 1500 for r in renews), renews)
            self.assertEqual(c.cache_stats().unused, 0)
            again = await asyncio.wait_for(c.acquire("k", ttl=1.5), STEP)
            self.assertIsNot(again, lease)
            self.assertEqual(await sent(f, c), [ACQUIRE, RENEW, RENEW, RENEW, ACQUIRE])

    async def test_auto_renewed_lease_keeps_its_own_renewals(self) -> None:
        gw = Gateway()
        async with Fake(gw, features="wanted") as f, lockgate.Client([f.addr], cache_leases=True) as c:
            t0 = time.monotonic()
            lease = await asyncio.wait_for(c.acquire("k", ttl=0.6, auto_renew=True), STEP)
            await lease.release()
            await f.wait_for(lambda r: r["commandType"] == RENEW, 4)
            self.assertTrue(lease.held)
            # One renewal loop, not two: renewals are ttl/3 = 0.2 s apart, so
            # the fourth comes 0.8 s after the grant (two loops: after 0.4 s).
            self.assertGreaterEqual(time.monotonic() - t0, 0.7, "the cache renews an auto-renewed lease too")
            self.assertIs(await asyncio.wait_for(c.acquire("k", ttl=0.6, auto_renew=True), STEP), lease)

    async def test_no_caching_without_the_feature_header(self) -> None:
        async with Fake(Gateway()) as f, lockgate.Client([f.addr], cache_leases=True) as c:
            lease = await asyncio.wait_for(c.acquire("k", ttl=5), STEP)
            self.assertFalse(c.signals_wanted)
            await lease.release()
            self.assertEqual(lease.lost_reason, "released")
            self.assertEqual(len(releases_of(f, lease)), 1)
            again = await asyncio.wait_for(c.acquire("k", ttl=5), STEP)
            self.assertIsNot(again, lease)
            self.assertEqual(c.cache_stats().kept, 0)

    async def test_close_releases_kept_leases(self) -> None:
        async with Fake(Gateway(), features="wanted") as f:
            c = lockgate.Client([f.addr], cache_leases=True)
            a = await asyncio.wait_for(c.acquire("a", ttl=5), STEP)
            b = await asyncio.wait_for(c.acquire("b", ttl=5), STEP)
            await a.release()
            await b.release()
            self.assertEqual(c.cache_stats().unused, 2)
            await asyncio.wait_for(c.close(), STEP)
            self.assertEqual((a.lost_reason, b.lost_reason), ("released", "released"))
            self.assertEqual((len(releases_of(f, a)), len(releases_of(f, b))), (1, 1))
            self.assertEqual(c.cache_stats().unused, 0)

    async def test_cache_off_by_default(self) -> None:
        async with Fake(Gateway(), features="wanted") as f, lockgate.Client([f.addr]) as c:
            lease = await asyncio.wait_for(c.acquire("k", ttl=5), STEP)
            await lease.release()
            self.assertEqual(lease.lost_reason, "released")
            self.assertEqual(c.cache_stats(), lockgate.CacheStats())


if __name__ == "__main__":
    unittest.main()
