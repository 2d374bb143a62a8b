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
}


def load(path: Optional[str] = None) -> List[Dict[str, Any]]:
    path = path or os.environ.get("LOCKGATE_SCENARIOS") or os.path.join(
        os.path.dirname(__file__), "..", "..", "scenarios", "scenarios.json")
    with open(path) as f:
        doc = json.load(f)
    if doc.get("version") != 1:
        raise ScenarioFailure(f"{path}: version {doc.get('version')!r}, this runner knows 1")
    return doc["scenarios"]
