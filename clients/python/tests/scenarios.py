"""The shared scenarios of clients/scenarios/scenarios.json, for the Python client.

Each scenario is an async function of a Run; SCENARIOS maps the file's names
to them. A name the file has and this module lacks fails the runner, so a new
scenario forces this client to implement it.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from typing import Any, Awaitable, Callable, Dict, List, Optional

import lockgate
from lockgate import Client

# Bounds of the waits inside scenarios (seconds): generous, since a failing
# scenario fails on them, and a passing one never reaches them.
STEP = 10.0
FAILOVER = 15.0


class ScenarioFailure(AssertionError):
    pass


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise ScenarioFailure(msg)


class Run:
    """What a scenario gets: the endpoints, the control API, its parameters
    and a key unique to this runner, scenario and run."""

    def __init__(self, endpoints: List[str], control: Optional[str], scenario: Dict[str, Any], run_id: str) -> None:
        self.endpoints = endpoints
        self.control_url = control
        self.scenario = scenario
        self.key = f"py/{scenario['name']}/{run_id}"
        self.ttl = scenario["ttlMs"] / 1000.0 if scenario.get("ttlMs") else None
        self.wait = scenario["waitMs"] / 1000.0 if scenario.get("waitMs") else None
        self._clients: List[Client] = []

    def client(self, endpoints: Optional[List[str]] = None, name: str = "", **opts: Any) -> Client:
        c = Client(endpoints or self.endpoints, client_id=f"py-{self.scenario['name']}-{name or len(self._clients)}", **opts)
        self._clients.append(c)
        return c

    async def close(self) -> None:
        for c in self._clients:
            await c.close()

    async def control(self, method: str, path: str) -> Dict[str, Any]:
        if not self.control_url:
            raise ScenarioFailure("LOCKGATE_CONTROL is not set: this scenario needs the control API")

        def call() -> Dict[str, Any]:
            req = urllib.request.Request(self.control_url.rstrip("/") + path, method=method,
                                         data=b"" if method == "POST" else None)
            with urllib.request.urlopen(req, timeout=120) as resp:
                return json.loads(resp.read() or b"{}")
        return await asyncio.to_thread(call)

    async def ops(self) -> Dict[str, float]:
        """The harness's GET /ops: the lock operations the nodes committed as leaders, by op."""
        return (await self.control("GET", "/ops")).get("ops") or {}


async def eventually(what: str, pred: Callable[[], Awaitable[bool]], timeout: float = STEP) -> None:
    """Wait until pred() holds (polled: the server's state has no event to await)."""
    end = time.monotonic() + timeout
    last: Optional[BaseException] = None
    while time.monotonic() < end:
        try:
            if await pred():
                return
        except lockgate.LockgateError as e:
            last = e
        await asyncio.sleep(0.02)
    raise ScenarioFailure(f"timed out after {timeout:g} s waiting for {what}" + (f" (last error: {last})" if last else ""))


async def waiters_are(c: Client, key: str, n: int) -> None:
    async def pred() -> bool:
        return (await c.inspect(key)).waiters == n
    await eventually(f"{n} waiter(s) on {key!r}", pred)


async def expect_not_found(c: Client, key: str) -> None:
    try:
        info = await c.inspect(key)
    except lockgate.NotFoundError:
        return
    raise ScenarioFailure(f"{key!r} should be free, but inspect shows it held: {info}")


async def granted(task: "asyncio.Task[lockgate.Lease]", what: str, timeout: float = STEP) -> lockgate.Lease:
    try:
        return await asyncio.wait_for(asyncio.shield(task), timeout)
    except asyncio.TimeoutError:
        raise ScenarioFailure(f"{what} was not granted within {timeout:g} s") from None


# -- the scenarios -------------------------------------------------------------------

async def contention_pushed_grant(r: Run) -> None:
    a, b = r.client(name="a"), r.client(name="b")
    la = await a.acquire(r.key, ttl=r.ttl)
    tb = asyncio.ensure_future(b.acquire(r.key, ttl=r.ttl))
    await waiters_are(a, r.key, 1)
    check(not tb.done(), "B was granted while A holds the key")
    if a.signals_wanted:
        await asyncio.wait_for(la.wanted.wait(), STEP)
    await la.release()
    check(la.lost_reason == "released", f"A's lease ended as {la.lost_reason!r}, not released")
    lb = await granted(tb, "B")
    check(lb.fencing_token > la.fencing_token, f"B's token {lb.fencing_token} is not above A's {la.fencing_token}")
    await lb.release()


async def fifo_three(r: Run) -> None:
    a = r.client(name="a")
    la = await a.acquire(r.key, ttl=r.ttl)
    tasks = []
    for i, name in enumerate("bcd", start=1):
        c = r.client(name=name)
        tasks.append(asyncio.ensure_future(c.acquire(r.key, ttl=r.ttl)))
        await waiters_are(a, r.key, i)
    await la.release()
    prev = la.fencing_token
    for i, t in enumerate(tasks):
        lease = await granted(t, "BCD"[i])
        for later in tasks[i + 1:]:
            check(not later.done(), f"a later waiter was granted before {'BCD'[i]} released")
        check(lease.fencing_token > prev, f"token {lease.fencing_token} of {'BCD'[i]} is not above {prev}")
        prev = lease.fencing_token
        await lease.release()


async def expiry(r: Run) -> None:
    assert r.ttl is not None
    a, b = r.client(name="a"), r.client(name="b")
    la = await a.acquire(r.key, ttl=r.ttl, auto_renew=False)
    lb = await b.acquire(r.key, ttl=r.ttl)
    after = time.monotonic() - la.sent
    check(after >= r.ttl * 0.9, f"B was granted {after * 1000:.0f} ms after A's acquire, before A's TTL of {r.ttl * 1000:.0f} ms")
    await asyncio.wait_for(la.lost.wait(), STEP)
    check(la.lost_reason == "expired", f"A's lease ended as {la.lost_reason!r}, not expired")
    check(not la.held, "A's lease says it is held past its deadline")
    check(lb.fencing_token > la.fencing_token, "B's token is not above A's")
    await lb.release()


async def renew(r: Run) -> None:
    assert r.ttl is not None
    a = r.client(name="a")
    la = await a.acquire(r.key, ttl=r.ttl, auto_renew=True)
    first_deadline = la.deadline
    # Hold for 4×ttl: the scenario's own duration, not a synchronisation.
    try:
        await asyncio.wait_for(la.lost.wait(), 4 * r.ttl)
        raise ScenarioFailure(f"the lease was reported lost ({la.lost_reason}) while auto-renewed")
    except asyncio.TimeoutError:
        pass
    check(la.held, "the lease is not held after 4×ttl of auto-renewal")
    check(la.deadline > first_deadline + 2 * r.ttl, "the deadline did not move with the renewals")
    info = await a.inspect(r.key)
    check(info.fencing_token == la.fencing_token, f"inspect shows token {info.fencing_token}, the lease has {la.fencing_token}")
    await la.release()


async def stale_release(r: Run) -> None:
    a, b = r.client(name="a"), r.client(name="b")
    la = await a.acquire(r.key, ttl=r.ttl)
    await la.release()
    lb = await b.acquire(r.key, ttl=r.ttl)
    try:
        await la.release()
        raise ScenarioFailure("a second release of A's lease succeeded")
    except lockgate.NotHeldError:
        pass
    info = await b.inspect(r.key)
    check(info.fencing_token == lb.fencing_token and info.owner == b.client_id,
          f"after A's stale release the key shows {info}, not B's lease (token {lb.fencing_token})")
    check(not lb.lost.is_set(), "B's lease ended")
    await lb.release()


async def try_acquire_held(r: Run) -> None:
    a, b = r.client(name="a"), r.client(name="b")
    la = await a.acquire(r.key, ttl=r.ttl)
    try:
        lb = await b.try_acquire(r.key, ttl=r.ttl)
        raise ScenarioFailure(f"B's try-acquire of a held key was granted (token {lb.fencing_token})")
    except lockgate.HeldError as e:
        check(e.owner == a.client_id, f"held error names owner {e.owner!r}, not A's {a.client_id!r}")
        check(e.fencing_token == la.fencing_token, f"held error names token {e.fencing_token}, not A's {la.fencing_token}")
    await la.release()


async def wait_timeout(r: Run) -> None:
    assert r.wait is not None
    a, b = r.client(name="a"), r.client(name="b")
    la = await a.acquire(r.key, ttl=r.ttl)
    t0 = time.monotonic()
    try:
        lb = await b.acquire(r.key, ttl=r.ttl, wait=r.wait)
        raise ScenarioFailure(f"B was granted a held key (token {lb.fencing_token})")
    except lockgate.LockTimeoutError as e:
        took = time.monotonic() - t0
        check(isinstance(e, TimeoutError), "LockTimeoutError is not a TimeoutError")
        check(took >= r.wait, f"B's acquire timed out after {took * 1000:.0f} ms, before waitMs {r.wait * 1000:.0f}")
        check(took < r.wait + 5, f"B's acquire timed out only after {took:.1f} s")
    await la.release()
    await expect_not_found(a, r.key)


async def cancel(r: Run) -> None:
    a, b = r.client(name="a"), r.client(name="b")
    la = await a.acquire(r.key, ttl=r.ttl)
    tb = asyncio.ensure_future(b.acquire(r.key, ttl=r.ttl))
    await waiters_are(a, r.key, 1)
    tb.cancel()
    try:
        lb = await tb
        raise ScenarioFailure(f"the cancelled acquire returned a lease (token {lb.fencing_token})")
    except asyncio.CancelledError:
        pass
    info = await a.inspect(r.key)
    check(info.waiters == 0, f"{info.waiters} waiter(s) left after the cancel")
    await la.release()
    await expect_not_found(a, r.key)


async def redirect_from_follower(r: Run) -> None:
    eps = await r.control("GET", "/endpoints")
    follower = eps.get("follower")
    check(bool(follower), f"the control API names no follower: {eps}")
    c = r.client([follower], name="f")
    lease = await c.acquire(r.key, ttl=r.ttl)
    check(lease.fencing_token > 0, "no fencing token")
    await lease.release()
    check(lease.lost_reason == "released", f"the lease ended as {lease.lost_reason!r}")


async def leader_killed_while_holding(r: Run) -> None:
    assert r.ttl is not None
    try:
        a = r.client(name="a")
        la = await a.acquire(r.key, ttl=r.ttl, auto_renew=True)
        killed = await r.control("POST", "/kill-leader")
        t_kill = time.monotonic()

        async def renewed_on_new_leader() -> bool:
            if la.lost.is_set():
                raise ScenarioFailure(f"A's lease was reported lost ({la.lost_reason}) after the leader {killed} died")
            if la.sent <= t_kill:
                return False
            info = await a.inspect(r.key)
            return info.fencing_token == la.fencing_token
        await eventually("A's lease renewed on the new leader with the same token", renewed_on_new_leader, FAILOVER)
        check(la.held, "A's lease is not held after the failover")
        await la.release()
    finally:
        await r.control("POST", "/restore")


async def leader_killed_while_waiting(r: Run) -> None:
    try:
        a, b = r.client(name="a"), r.client(name="b")
        la = await a.acquire(r.key, ttl=r.ttl, auto_renew=True)
        tb = asyncio.ensure_future(b.acquire(r.key, ttl=r.ttl))
        await waiters_are(a, r.key, 1)
        await r.control("POST", "/kill-leader")
        await la.release()  # re-sent until the new leader answers
        lb = await granted(tb, "B after the failover", FAILOVER)
        check(lb.fencing_token > la.fencing_token, f"B's token {lb.fencing_token} is not above A's {la.fencing_token}")
        await lb.release()
    finally:
        await r.control("POST", "/restore")


async def bad_input(r: Run) -> None:
    c = r.client(name="a")
    for key, what in (("", "an empty key"), ("k" * 1025, "a key of 1025 bytes")):
        try:
            await c.acquire(key, ttl=1.0)
            raise ScenarioFailure(f"{what} was granted")
        except lockgate.ValidationError as e:
            check(e.code == "invalid_key", f"{what}: code {e.code!r}, not invalid_key")
    for ttl in (0.001, 0.009):
        try:
            await c.try_acquire(r.key, ttl=ttl)
            raise ScenarioFailure(f"ttl {ttl} s was granted")
        except lockgate.ValidationError as e:
            check(e.code == "invalid_ttl", f"ttl {ttl}: code {e.code!r}, not invalid_ttl")
    await expect_not_found(c, r.key)


async def lease_cache(r: Run) -> None:
    a, b = r.client(name="a", cache_leases=True), r.client(name="b")
    la = await a.acquire(r.key, ttl=r.ttl, auto_renew=True)
    check(a.signals_wanted, "the gateway did not announce wanted pushes (Lockgate-Features): nothing would be cached")
    await la.release()
    check(not la.lost.is_set(), f"A's released lease ended ({la.lost_reason}) instead of staying in A's cache")
    info = await b.inspect(r.key)
    check(info.fencing_token == la.fencing_token and info.owner == a.client_id,
          f"while A's cache keeps the lease, inspect shows {info}, not A's token {la.fencing_token}")
    again = await a.acquire(r.key, ttl=r.ttl, auto_renew=True)
    check(again is la and again.fencing_token == la.fencing_token,
          f"A's second acquire got token {again.fencing_token}, not the cached lease's {la.fencing_token}")
    check(a.cache_stats().hits == 1, f"A's cache stats {a.cache_stats()}, want 1 hit")
    await again.release()
    lb = await granted(asyncio.ensure_future(b.acquire(r.key, ttl=r.ttl)), "B while A's cache kept the key")
    check(lb.fencing_token > la.fencing_token, f"B's token {lb.fencing_token} is not above A's {la.fencing_token}")
    try:
        await asyncio.wait_for(la.lost.wait(), STEP)
    except asyncio.TimeoutError:
        raise ScenarioFailure("A's reclaimed lease never reported that it ended") from None
    check(la.lost_reason == "released", f"A's reclaimed lease ended as {la.lost_reason!r}, not released")
    s = a.cache_stats()
    check(s.reclaimed == 1 and s.unused == 0, f"A's cache stats {s}, want 1 reclaimed and 0 unused")
    await lb.release()


# -- the primitives' scenarios (clients/scenarios_primitives_go_test.go has their meaning) -

async def expect_raises(coro: Awaitable[Any], exc: type, what: str) -> Any:
    try:
        got = await coro
    except exc as e:
        return e
    except Exception as e:
        raise ScenarioFailure(f"{what}: {type(e).__name__}: {e}, want {exc.__name__}") from None
    raise ScenarioFailure(f"{what}: succeeded ({got!r}), want {exc.__name__}")


async def holds(c: Client, lease: lockgate.Lease) -> None:
    info = await c.inspect(lease.key)
    check(info.fencing_token == lease.fencing_token and info.owner == lease.owner,
          f"inspect {lease.key!r}: {info}, want owner {lease.owner} token {lease.fencing_token}")


async def shared_readers(r: Run) -> None:
    a, b, c = r.client(name="a"), r.client(name="b"), r.client(name="c")
    feats = await a.features()
    want = ["wanted", "shared", "semaphore", "multikey", "watch", "lockdelay", "sessions", "watchprefix"]
    check(feats == want, f"features {feats}, want {want}")
    la = await a.acquire(r.key, ttl=r.ttl, mode="shared")
    lb = await b.try_acquire(r.key, ttl=r.ttl, mode="shared")
    check(la.mode == "shared" and lb.mode == "shared" and lb.fencing_token > la.fencing_token,
          f"leases A {la.mode}/{la.fencing_token}, B {lb.mode}/{lb.fencing_token}: want shared, B's token above A's")
    info = await c.inspect(r.key)
    check(info.mode == "shared" and [h.fencing_token for h in info.holders] == [la.fencing_token, lb.fencing_token],
          f"inspect {info}: want mode shared, holders A ({la.fencing_token}) then B ({lb.fencing_token})")
    await expect_raises(c.try_acquire(r.key, ttl=r.ttl), lockgate.HeldError, "C's exclusive try beside two readers")
    tc = asyncio.ensure_future(c.acquire(r.key, ttl=r.ttl))
    await waiters_are(a, r.key, 1)
    await la.release()
    check(not tc.done(), "C's exclusive acquire answered while B still reads")
    await holds(c, lb)
    await lb.release()
    lc = await granted(tc, "C's exclusive acquire after both releases")
    check(lc.mode == "exclusive" and lc.fencing_token > lb.fencing_token,
          f"C's lease {lc.mode}/{lc.fencing_token}: want exclusive above {lb.fencing_token}")
    await lc.release()


async def semaphore_permits(r: Run) -> None:
    a, b, c = r.client(name="a"), r.client(name="b"), r.client(name="c")
    la = await a.acquire(r.key, ttl=r.ttl, permits=2)
    lb = await b.acquire(r.key, ttl=r.ttl, permits=2)
    check(la.permits == 2 and lb.permits == 2 and la.mode == "shared",
          f"permits A {la.permits} ({la.mode}), B {lb.permits}: want 2, shared")
    info = await c.inspect(r.key)
    check(info.permits == 2 and len(info.holders) == 2, f"inspect {info}: want permits 2 with 2 holders")
    await expect_raises(c.try_acquire(r.key, ttl=r.ttl, permits=2), lockgate.HeldError, "C's third permit")
    await expect_raises(c.try_acquire(r.key, ttl=r.ttl, permits=3), lockgate.PermitsMismatchError,
                        "C with 3 permits on a semaphore of 2")
    tc = asyncio.ensure_future(c.acquire(r.key, ttl=r.ttl, permits=2))
    await waiters_are(a, r.key, 1)
    await la.release()
    lc = await granted(tc, "C's permit after A's release")
    check(lc.permits == 2 and lc.fencing_token > lb.fencing_token,
          f"C's permit: {lc.permits} permits, token {lc.fencing_token}; want 2, above {lb.fencing_token}")
    await lb.release()
    await lc.release()
    await expect_not_found(a, r.key)


async def acquire_all(r: Run) -> None:
    a, b = r.client(name="a"), r.client(name="b")
    keys = [f"{r.key}/{i}" for i in (1, 2, 3)]
    la = await a.acquire(keys[1], ttl=r.ttl)
    await expect_raises(b.try_acquire_all(keys, ttl=r.ttl), lockgate.HeldError, f"B's try of {keys} with one held")
    await expect_not_found(a, keys[0])
    await expect_not_found(a, keys[2])
    tb = asyncio.ensure_future(b.acquire_all(keys, ttl=r.ttl))
    await waiters_are(a, keys[1], 1)
    check(not tb.done(), f"B's acquire-all answered while A holds {keys[1]}")
    await la.release()
    try:
        leases = await asyncio.wait_for(asyncio.shield(tb), STEP)
    except asyncio.TimeoutError:
        raise ScenarioFailure("B's acquire-all was not granted after A's release") from None
    check([l.key for l in leases] == keys and all(l.fencing_token for l in leases),
          f"B's leases {leases}: want one per key of {keys}, in order, with tokens")
    for lease in leases:
        await holds(a, lease)
    check(leases[1].fencing_token > la.fencing_token,
          f"B's token for {keys[1]} is {leases[1].fencing_token}, not above A's {la.fencing_token}")
    for lease in leases:
        await lease.release()
    for k in keys:
        await expect_not_found(a, k)


async def watch(r: Run) -> None:
    a, w = r.client(name="a"), r.client(name="w")
    seen: List[str] = []
    async with w.watch(r.key) as events:
        async def want(typ: str, token: Optional[int], owner: str = "", value: str = "") -> Any:
            try:
                ev = await asyncio.wait_for(events.next(), STEP)
            except asyncio.TimeoutError:
                raise ScenarioFailure(f"no event within {STEP:g} s after {seen}") from None
            check(ev is not None, f"the watch ended after {seen}")
            seen.append(ev.type)
            check(ev.type == typ and ev.fencing_token == token and (not owner or ev.owner == owner)
                  and (not value or ev.value == value) and ev.key == r.key,
                  f"after {seen[:-1]}: event {ev}; want {typ} token {token} owner {owner!r} value {value!r}")
            return ev
        await want("synced", None)
        la = await a.acquire(r.key, ttl=10.0, value="v1")
        g = await want("granted", la.fencing_token, la.owner, "v1")
        async with w.watch(r.key) as second:
            h = await asyncio.wait_for(second.next(), STEP)
            check(h is not None and h.type == "holder" and h.fencing_token == la.fencing_token and h.owner == la.owner,
                  f"second watch's first event {h}: want holder A")
            sy = await asyncio.wait_for(second.next(), STEP)
            check(sy is not None and sy.type == "synced", f"second watch's second event {sy}: want synced")
        await la.release()
        rel = await want("released", la.fencing_token)
        lx = await a.acquire(r.key, ttl=r.ttl)
        g2 = await want("granted", lx.fencing_token, lx.owner)
        ex = await want("expired", lx.fencing_token)
        check(g.revision < rel.revision < g2.revision < ex.revision,
              f"revisions {g.revision}, {rel.revision}, {g2.revision}, {ex.revision}: want increasing")
    check(await events.next() is None, "a closed watch goes on")
    await expect_not_found(a, r.key)


async def lock_delay(r: Run) -> None:
    a, b = r.client(name="a"), r.client(name="b")
    delay = 1.5
    la = await a.acquire(r.key, ttl=r.ttl, lock_delay=delay)
    await asyncio.wait_for(la.lost.wait(), STEP)

    async def gone() -> bool:
        try:
            await b.inspect(r.key)
            return False
        except lockgate.NotFoundError:
            return True
    await eventually("A's lease to expire on the server", gone)
    freed = time.monotonic()
    e = await expect_raises(b.try_acquire(r.key, ttl=10.0), lockgate.DelayedError, "B's try within the lock-delay")
    check(0 < e.retry_in <= delay, f"retry_in {e.retry_in} s: want within (0, {delay}]")
    lb = await granted(asyncio.ensure_future(b.acquire(r.key, ttl=10.0)), "B's waiting acquire", STEP + delay)
    since = time.monotonic() - freed
    check(since <= delay + 5, f"B granted {since:.3f} s after the key was freed: want about the delay {delay} s")
    check(lb.fencing_token > la.fencing_token, f"B's token {lb.fencing_token} not above A's {la.fencing_token}")
    await lb.release()


async def election_scenario(r: Run) -> None:
    from lockgate import election
    a, b, o = r.client(name="a"), r.client(name="b"), r.client(name="o")
    cur = await election.current(o, r.key)
    check(not cur.present, f"current before any campaign: {cur}; want nobody")
    leaders = election.observe(o, r.key)
    seen: List[str] = []

    async def expect(present: bool, token: int = 0, value: str = "") -> None:
        try:
            ld = await asyncio.wait_for(leaders.__anext__(), STEP)
        except asyncio.TimeoutError:
            raise ScenarioFailure(f"no leader reported within {STEP:g} s after {seen}") from None
        except StopAsyncIteration:
            raise ScenarioFailure(f"observe ended after {seen}") from None
        seen.append(f"{ld.present}/{ld.fencing_token}/{ld.value}")
        check(ld.present == present and (not present or (ld.fencing_token == token and ld.value == value)),
              f"leaders {seen}: the last want present {present} token {token} value {value!r}")
    try:
        await expect(False)
        ea = await election.campaign(a, r.key, "a", ttl=r.ttl)
        await expect(True, ea.fencing_token, "a")
        cur = await election.current(o, r.key)
        check(cur.present and cur.fencing_token == ea.fencing_token and cur.value == "a", f"current while A leads: {cur}")
        tb = asyncio.ensure_future(election.campaign(b, r.key, "b", ttl=r.ttl))
        await waiters_are(o, r.key, 1)
        await ea.resign()
        try:
            eb = await asyncio.wait_for(asyncio.shield(tb), STEP)
        except asyncio.TimeoutError:
            raise ScenarioFailure("B's campaign: not leading after A's resignation") from None
        check(eb.fencing_token > ea.fencing_token, f"B's term {eb.fencing_token} not above A's {ea.fencing_token}")
        await expect(False)
        await expect(True, eb.fencing_token, "b")
        await eb.resign()
        await expect(False)
        cur = await election.current(o, r.key)
        check(not cur.present, f"current after both resigned: {cur}; want nobody")
    finally:
        await leaders.aclose()


# -- the sessions scenarios (clients/scenarios_sessions_go_test.go has their meaning) ----

async def still_held(leases: List[lockgate.Lease], hold: float) -> None:
    """Hold for ``hold`` seconds (the scenario's own duration), failing as soon as a lease ends."""
    ended = [asyncio.ensure_future(lease.lost.wait()) for lease in leases]
    try:
        done, _ = await asyncio.wait(ended, timeout=hold, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in ended:
            t.cancel()
    for lease in leases:
        check(not lease.lost.is_set(), f"the lease of {lease.key!r} was lost while held ({lease.lost_reason})")


async def session_many_leases(r: Run) -> None:
    assert r.ttl is not None
    a = r.client(name="a", session_ttl=r.ttl)
    before = await r.ops()
    keys = [f"{r.key}/{i}" for i in range(r.scenario.get("leases") or 20)]
    leases = [await a.acquire(k) for k in keys]
    s = a.session
    check(s is not None and abs(s.ttl - r.ttl) < 1e-6, f"A's own session {s}: want one with TTL {r.ttl} s")
    assert s is not None
    check(all(lease.session is s for lease in leases), "not every lease is in A's session")
    check(s.leases == len(keys), f"the session holds {s.leases} leases, want {len(keys)}")
    await still_held(leases, 4 * r.ttl)
    for lease in leases:
        check(lease.held, f"the lease of {lease.key!r} is past its deadline")
        await holds(a, lease)
    after = await r.ops()
    keep_alives = after.get("session-renew", 0) - before.get("session-renew", 0)
    renewals = after.get("renew", 0) - before.get("renew", 0)
    print(f"# session-many-leases: {len(keys)} leases held {4 * r.ttl:g} s: {keep_alives:g} session keep-alives, "
          f"{renewals:g} lease renewals on the server ({s.renewals} here)", flush=True)
    check(keep_alives >= 3 and renewals < len(keys),
          f"the server committed {keep_alives:g} session keep-alives and {renewals:g} lease renewals while "
          f"{len(keys)} leases were held: want ≥ 3 keep-alives and fewer renewals than leases")
    for lease in leases:
        await lease.release()


async def session_close_releases(r: Run) -> None:
    a, b = r.client(name="a"), r.client(name="b")
    keys = [f"{r.key}/{i}" for i in range(2)]
    s = await a.open_session(r.ttl)
    las = [await a.acquire(k, session=s) for k in keys]
    tb = asyncio.ensure_future(b.acquire(keys[0], ttl=r.ttl))
    await waiters_are(a, keys[0], 1)
    check(not tb.done(), "B's acquire answered while A's session holds the key")
    await a.close_session(s)
    lb = await granted(tb, "B's acquire after A closed its session")
    check(lb.fencing_token > las[0].fencing_token, f"B's token {lb.fencing_token} is not above A's {las[0].fencing_token}")
    for lease in las:
        check(lease.lost_reason == "released", f"A's lease of {lease.key!r} ended {lease.lost_reason!r}, want released")
    await expect_not_found(a, keys[1])
    await expect_raises(a.renew_session(s), lockgate.SessionExpiredError, "A's keep-alive of the closed session")
    await lb.release()


async def session_expiry(r: Run) -> None:
    assert r.ttl is not None
    a, b = r.client(name="a"), r.client(name="b")
    keys = [f"{r.key}/{i}" for i in range(3)]
    s = await a.open_session(r.ttl, keep_alive=False)
    las = [await a.acquire(k, session=s) for k in keys]
    tb = asyncio.ensure_future(b.acquire(keys[0], ttl=10))
    answered: List[float] = []
    tb.add_done_callback(lambda _t: answered.append(time.monotonic()))
    for lease in las:
        await asyncio.wait_for(lease.lost.wait(), r.ttl + 5)
        check(lease.lost_reason == "expired", f"A's lease of {lease.key!r} ended {lease.lost_reason!r}, want expired")
    lb = await granted(tb, "B's acquire after A's session expired")
    check(answered[0] >= las[0].deadline, f"B was granted {(las[0].deadline - answered[0]) * 1000:.0f} ms before A's deadline")
    check(lb.fencing_token > las[0].fencing_token, f"B's token {lb.fencing_token} is not above A's {las[0].fencing_token}")
    for k in keys[1:]:
        async def gone(k: str = k) -> bool:
            try:
                await b.inspect(k)
            except lockgate.NotFoundError:
                return True
            return False
        await eventually(f"{k!r} to be free", gone)
    await expect_raises(a.renew_session(s), lockgate.SessionExpiredError, "A's keep-alive of the expired session")
    await lb.release()


async def session_leader_killed(r: Run) -> None:
    assert r.ttl is not None
    try:
        a = r.client(name="a", session_ttl=r.ttl)
        las = [await a.acquire(f"{r.key}/{i}") for i in range(3)]
        s = las[0].session
        check(s is not None, "A's lease is in no session")
        assert s is not None
        killed = await r.control("POST", "/kill-leader")
        t_kill = time.monotonic()

        async def kept_alive_after_the_kill() -> bool:
            for lease in las:
                if lease.lost.is_set():
                    raise ScenarioFailure(f"the lease of {lease.key!r} was lost ({lease.lost_reason}) after the leader {killed} died")
            return s.sent > t_kill
        await eventually("a keep-alive of A's session after the kill", kept_alive_after_the_kill, FAILOVER)
        ep = await r.control("GET", "/endpoints")
        check(killed.get("killed") not in ep.get("endpoints", []), f"the killed leader {killed} still runs: {ep}")
        for lease in las:
            check(lease.held and lease.deadline == s.deadline, f"the lease of {lease.key!r}: {lease}, session deadline {s.deadline}")
            await holds(a, lease)
        for lease in las:
            await lease.release()
    finally:
        await r.control("POST", "/restore")


SCENARIOS: Dict[str, Callable[[Run], Awaitable[None]]] = {
    "contention-pushed-grant": contention_pushed_grant,
    "fifo-three": fifo_three,
    "expiry": expiry,
    "renew": renew,
    "stale-release": stale_release,
    "try-acquire-held": try_acquire_held,
    "wait-timeout": wait_timeout,
    "cancel": cancel,
    "redirect-from-follower": redirect_from_follower,
    "leader-killed-while-holding": leader_killed_while_holding,
    "leader-killed-while-waiting": leader_killed_while_waiting,
    "bad-input": bad_input,
    "lease-cache": lease_cache,
    "shared-readers": shared_readers,
    "semaphore-permits": semaphore_permits,
    "acquire-all": acquire_all,
    "watch": watch,
    "lock-delay": lock_delay,
    "election": election_scenario,
    "session-many-leases": session_many_leases,
    "session-close-releases": session_close_releases,
    "session-expiry": session_expiry,
    "session-leader-killed": session_leader_killed,
}


def load(path: Optional[str] = None) -> List[Dict[str, Any]]:
    path = path or os.environ.get("LOCKGATE_SCENARIOS") or os.path.join(
        os.path.dirname(__file__), "..", "..", "scenarios", "scenarios.json")
    with open(path) as f:
        doc = json.load(f)
    if doc.get("version") != 1:
        raise ScenarioFailure(f"{path}: version {doc.get('version')!r}, this runner knows 1")
    return doc["scenarios"]
