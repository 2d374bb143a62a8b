"""The Python runner of clients/scenarios: an interpreter of the scenarios' steps.

The vocabulary is clients/scenarios/README.md; the Go runner
(clients/scenarios_steps_go_test.go) and the TypeScript runner
(clients/js/test/scenarios.ts) interpret the same steps. STEPS maps each step
kind to its implementation; a kind it lacks fails the scenario, so a new kind
forces this runner to implement it. run_scenario raises why a scenario failed.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from typing import Any, Awaitable, Callable, Dict, List, Optional

import lockgate
from lockgate import Client, election

# Default bounds of a step (seconds; the step's withinMs overrides them): a
# call, and a wait for something pushed (an async call's answer, an event).
CALL = 15.0
STEP = 10.0


class ScenarioFailure(AssertionError):
    pass


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise ScenarioFailure(msg)


Step = Dict[str, Any]


def load(path: Optional[str] = None) -> List[Dict[str, Any]]:
    """Every NAME.json of the directory ``path`` (default $LOCKGATE_SCENARIOS,
    else clients/scenarios), in the order of the names."""
    path = path or os.environ.get("LOCKGATE_SCENARIOS") or os.path.join(
        os.path.dirname(__file__), "..", "..", "scenarios")
    out = []
    for f in sorted(os.listdir(path)):
        if not f.endswith(".json"):
            continue
        with open(os.path.join(path, f)) as fh:
            doc = json.load(fh)
        if doc.get("name") != f[:-len(".json")]:
            raise ScenarioFailure(f"{f}: name {doc.get('name')!r}, want the file's name")
        if not doc.get("steps"):
            raise ScenarioFailure(f"{f}: no steps")
        out.append(doc)
    if not out:
        raise ScenarioFailure(f"{path}: no scenario (NAME.json)")
    return out


def secs(ms: Optional[int], default: float) -> float:
    return default if ms is None else ms / 1000.0


# The error classes of the codes that have their own (LockgateError for the others).
ERROR_CLASS: Dict[str, type] = {
    "held": lockgate.HeldError,
    "not_held": lockgate.NotHeldError,
    "not_found": lockgate.NotFoundError,
    "timeout": lockgate.LockTimeoutError,
    "delayed": lockgate.DelayedError,
    "permits_mismatch": lockgate.PermitsMismatchError,
    "session_expired": lockgate.SessionExpiredError,
    "invalid_key": lockgate.ValidationError,
    "invalid_ttl": lockgate.ValidationError,
}


class Pending:
    """A call in flight: an acquire, an acquire-all or a campaign."""

    def __init__(self, task: "asyncio.Task[Any]", keys: List[str], client: Client) -> None:
        self.task = task
        self.keys = keys
        self.client = client
        self.at = 0.0
        task.add_done_callback(self._done)

    def _done(self, _t: "asyncio.Task[Any]") -> None:
        self.at = time.monotonic()


class Run:
    """One scenario's run: the endpoints, the control API, a key unique to this
    runner, scenario and run, and what its steps named."""

    def __init__(self, endpoints: List[str], control: Optional[str], scenario: Dict[str, Any], run_id: str) -> None:
        self.endpoints = endpoints
        self.control_url = control
        self.scenario = scenario
        self.key = f"py/{scenario['name']}/{run_id}"
        self.clients: Dict[str, Client] = {}
        self.leases: Dict[str, List[lockgate.Lease]] = {}
        self.leaderships: Dict[str, Any] = {}
        self.pending: Dict[str, Pending] = {}
        self.sessions: Dict[str, lockgate.Session] = {}
        self.watches: Dict[str, lockgate.Watch] = {}
        self.observers: Dict[str, Any] = {}
        self.events: Dict[str, Any] = {}
        self.marks: Dict[str, float] = {}
        self.ops: Dict[str, Dict[str, float]] = {}
        self.follower = ""
        self.killed = ""

    async def close(self) -> None:
        for p in self.pending.values():
            p.task.cancel()
        for w in self.watches.values():
            await w.aclose()
        for o in self.observers.values():
            await o.aclose()
        for c in self.clients.values():
            await c.close()
        if self.killed:
            await self.control("POST", "/restore")

    async def control(self, method: str, path: str) -> Dict[str, Any]:
        if not self.control_url:
            raise ScenarioFailure("LOCKGATE_CONTROL is not set: this scenario needs the control API")

        def call() -> Dict[str, Any]:
            req = urllib.request.Request(self.control_url.rstrip("/") + path, method=method,
                                         data=b"" if method == "POST" else None)
            with urllib.request.urlopen(req, timeout=120) as resp:
                return json.loads(resp.read() or b"{}")
        return await asyncio.to_thread(call)

    def client(self, name: str) -> Client:
        if name not in self.clients:
            raise ScenarioFailure(f"no client {name!r} (a client step opens it)")
        return self.clients[name]

    def group(self, name: str) -> List[lockgate.Lease]:
        ls = self.leases.get(name)
        if not ls:
            raise ScenarioFailure(f"no lease {name!r} (not granted, or not yet awaited)")
        return ls

    def one(self, name: str) -> lockgate.Lease:
        ls = self.group(name)
        check(len(ls) == 1, f"{name!r} names {len(ls)} leases, want one (name one as {name}.0)")
        return ls[0]

    def groups(self, names: Optional[List[str]]) -> List[lockgate.Lease]:
        return [l for n in names or [] for l in self.group(n)]

    def mark(self, name: Optional[str]) -> float:
        if not name or name == "now":
            return time.monotonic()
        if name not in self.marks:
            raise ScenarioFailure(f"no time mark {name!r}")
        return self.marks[name]

    def session(self, name: str) -> lockgate.Session:
        if name not in self.sessions:
            raise ScenarioFailure(f"no session {name!r}")
        return self.sessions[name]

    def key_of(self, st: Step, i: int = 0) -> str:
        """The key a step names: the scenario's key with its suffix ("{i}": i),
        its raw key, or a key of keyBytes bytes."""
        if "rawKey" in st:
            return st["rawKey"]
        if st.get("keyBytes"):
            return "k" * st["keyBytes"]
        if "key" in st:
            return self.key + st["key"].replace("{i}", str(i))
        return self.key

    def start(self, name: str, client: Client, keys: List[str], coro: Awaitable[Any]) -> Pending:
        """Run coro in the background as the pending call name, marking
        name.sent now and name.answered when it returns."""
        self.marks[name + ".sent"] = time.monotonic()
        op = Pending(asyncio.ensure_future(coro), keys, client)
        self.pending[name] = op
        return op

    async def finish(self, name: str, op: Pending, st: Step, timeout: float) -> None:
        """Wait up to timeout for op and judge its outcome by st: the error st
        expects, or a grant, bound to name."""
        await asyncio.wait({op.task}, timeout=timeout)
        if not op.task.done():
            raise ScenarioFailure(f"{name}: no answer within {timeout:g} s")
        del self.pending[name]
        self.marks[name + ".answered"] = op.at
        err: Optional[BaseException] = asyncio.CancelledError() if op.task.cancelled() else op.task.exception()
        if st.get("expectError"):
            self.match_error(None if err else op.task.result(), err, st, name)
            return
        if err is not None:
            raise ScenarioFailure(f"{name}: {type(err).__name__}: {err}")
        got = op.task.result()
        if isinstance(got, list):
            ls = got
        else:
            self.leaderships[name] = got
            ls = [got.lease]
        check(len(ls) == len(op.keys), f"{name}: {len(ls)} leases for {len(op.keys)} keys")
        for i, l in enumerate(ls):
            check(l.key == op.keys[i] and l.fencing_token > 0,
                  f"{name}: lease {i}: key {l.key!r} token {l.fencing_token}; want {op.keys[i]!r} with a token")
        if st.get("sameAs"):
            first = self.one(st["sameAs"])
            check(ls[0] is first and ls[0].fencing_token == first.fencing_token,
                  f"{name}: token {ls[0].fencing_token}, a lease other than {st['sameAs']}'s (token {first.fencing_token})")
        # The lease's own sent (when its request went out) is later than the
        # call's start: the stricter mark.
        if len(ls) == 1:
            self.marks[name + ".sent"] = ls[0].sent
        self.bind(name, ls)

    def bind(self, name: str, ls: List[lockgate.Lease]) -> None:
        self.leases[name] = ls
        if len(ls) > 1:
            for i, l in enumerate(ls):
                self.leases[f"{name}.{i}"] = [l]

    def match_error(self, got: Any, err: Optional[BaseException], st: Step, what: str) -> None:
        """Check an outcome against st's expectError: the error's class where the
        code has one, its code, and details."""
        code = st["expectError"]
        if err is None:
            raise ScenarioFailure(f"{what}: succeeded ({got!r}), want {code}")
        if code == "cancelled":
            check(isinstance(err, asyncio.CancelledError), f"{what}: {type(err).__name__}: {err}, want asyncio.CancelledError")
            return
        cls = ERROR_CLASS.get(code, lockgate.LockgateError)
        check(isinstance(err, cls) and getattr(err, "code", None) == code,
              f"{what}: {type(err).__name__}: {err}, want {cls.__name__} code {code}")
        if code == "timeout":
            check(isinstance(err, TimeoutError), "LockTimeoutError is not a TimeoutError")
        if code == "held" and st.get("holder"):
            l = self.one(st["holder"])
            check(err.owner == l.owner and err.fencing_token == l.fencing_token,  # type: ignore[attr-defined]
                  f"{what}: held names {err.owner!r} token {err.fencing_token}, want {st['holder']}: "  # type: ignore[attr-defined]
                  f"{l.owner!r} token {l.fencing_token}")
        if code == "delayed" and st.get("retryInMaxMs"):
            mx = st["retryInMaxMs"] / 1000.0
            check(0 < err.retry_in <= mx, f"{what}: retry_in {err.retry_in} s: want within (0, {mx}]")  # type: ignore[attr-defined]


def not_ended(ls: List[lockgate.Lease]) -> None:
    for l in ls:
        check(not l.lost.is_set() and l.held, f"the lease of {l.key!r} reports {l.lost_reason or 'its deadline passed'}")


# -- the step kinds ------------------------------------------------------------------

async def step_client(r: Run, st: Step) -> None:
    endpoints = r.endpoints
    if st.get("endpoints") == "follower":
        ep = await r.control("GET", "/endpoints")
        r.follower = ep.get("follower") or ""
        check(bool(r.follower), f"the control API names no follower: {ep}")
        endpoints = [r.follower]
    elif st.get("endpoints") not in (None, "all"):
        raise ScenarioFailure(f"endpoints {st['endpoints']!r}: want all or follower")
    name = st["as"]
    check(name not in r.clients, f"client {name!r} opened twice")
    opts: Dict[str, Any] = {}
    if st.get("cacheLeases"):
        opts["cache_leases"] = True
    if st.get("sessionTtlMs"):
        opts["session_ttl"] = st["sessionTtlMs"] / 1000.0
    r.clients[name] = Client(endpoints, client_id=f"py-{r.scenario['name']}-{name}", **opts)


def acquire(kind: str) -> Callable[[Run, Step], Awaitable[None]]:
    async def step(r: Run, st: Step) -> None:
        c = r.client(st["client"])
        opts: Dict[str, Any] = {}
        for k, o, scale in (("ttlMs", "ttl", 1000.0), ("waitMs", "wait", 1000.0), ("lockDelayMs", "lock_delay", 1000.0)):
            if k in st:
                opts[o] = st[k] / scale
        for k, o in (("autoRenew", "auto_renew"), ("mode", "mode"), ("permits", "permits"), ("value", "value")):
            if k in st:
                opts[o] = st[k]
        if st.get("session"):
            opts["session"] = r.session(st["session"])
        if kind in ("acquireAll", "tryAcquireAll"):
            calls = [(st["lease"], [r.key + k for k in st["keys"]])]
        elif st.get("count"):
            calls = [(f"{st['lease']}.{i}", [r.key_of(st, i)]) for i in range(st["count"])]
        else:
            calls = [(st["lease"], [r.key_of(st)])]
        granted: List[lockgate.Lease] = []
        for name, keys in calls:
            async def call(keys: List[str] = keys) -> List[lockgate.Lease]:
                if kind == "acquireAll":
                    return await c.acquire_all(keys, **opts)
                if kind == "tryAcquireAll":
                    return await c.try_acquire_all(keys, **opts)
                if kind == "tryAcquire":
                    return [await c.try_acquire(keys[0], **opts)]
                return [await c.acquire(keys[0], **opts)]
            op = r.start(name, c, keys, call())
            if st.get("async"):
                continue
            await r.finish(name, op, st, secs(st.get("withinMs"), CALL))
            if st.get("count") and not st.get("expectError"):
                granted += r.group(name)
        if st.get("count") and not st.get("async") and not st.get("expectError"):
            r.leases[st["lease"]] = granted
    return step


async def step_campaign(r: Run, st: Step) -> None:
    c = r.client(st["client"])
    key = r.key_of(st)
    op = r.start(st["lease"], c, [key], election.campaign(c, key, st.get("value", ""), ttl=secs(st.get("ttlMs"), 0) or None))
    if not st.get("async"):
        await r.finish(st["lease"], op, st, secs(st.get("withinMs"), CALL))


def pending(r: Run, name: str) -> Pending:
    if name not in r.pending:
        raise ScenarioFailure(f"no pending call {name!r}")
    return r.pending[name]


async def step_await(r: Run, st: Step) -> None:
    await r.finish(st["lease"], pending(r, st["lease"]), st, secs(st.get("withinMs"), STEP))


async def step_pending(r: Run, st: Step) -> None:
    op = pending(r, st["lease"])
    await asyncio.sleep(0)
    check(not op.task.done(), f"{st['lease']} answered already")


async def step_cancel(r: Run, st: Step) -> None:
    pending(r, st["lease"]).task.cancel()


async def step_release(r: Run, st: Step) -> None:
    for l in r.group(st["lease"]):
        err: Optional[BaseException] = None
        try:
            await asyncio.wait_for(l.release(), secs(st.get("withinMs"), CALL))
        except lockgate.LockgateError as e:
            err = e
        if st.get("expectError"):
            r.match_error(None, err, st, f"release of {l.key!r}")
        elif err is not None:
            raise err


async def step_release_rebuilt(r: Run, st: Step) -> None:
    """Release a copy of the lease rebuilt from its grant (as after a restart):
    it goes to the gateway whatever the client remembers about the lease."""
    l = r.one(st["lease"])
    c = r.client(st["client"])
    cp = lockgate.Lease(c, l.key, l.owner, l.fencing_token, l.lock_token, l.ttl, time.monotonic())
    err: Optional[BaseException] = None
    try:
        await asyncio.wait_for(c.release(cp), secs(st.get("withinMs"), CALL))
    except lockgate.LockgateError as e:
        err = e
    if st.get("expectError"):
        r.match_error(None, err, st, "release of a rebuilt copy")
    elif err is not None:
        raise err


async def step_resign(r: Run, st: Step) -> None:
    if st["lease"] not in r.leaderships:
        raise ScenarioFailure(f"no leadership {st['lease']!r}")
    await asyncio.wait_for(r.leaderships[st["lease"]].resign(), secs(st.get("withinMs"), CALL))


async def step_token_above(r: Run, st: Step) -> None:
    l, o = r.one(st["lease"]), r.one(st["above"])
    check(l.fencing_token > o.fencing_token, f"{st['lease']}'s token {l.fencing_token} is not above {st['above']}'s {o.fencing_token}")


async def step_check_lease(r: Run, st: Step) -> None:
    for l in r.group(st["lease"]):
        if "mode" in st:
            check(l.mode == st["mode"], f"lease of {l.key!r}: mode {l.mode}, want {st['mode']}")
        if "permits" in st:
            check(l.permits == st["permits"], f"lease of {l.key!r}: {l.permits} permits, want {st['permits']}")
    if "autoRenew" in st:
        # A Lease has no public accessor of its renewal: the ended steps see
        # the behaviour (README, "Where a runner cannot").
        print("# checkLease autoRenew: not readable through the Python client's public API", flush=True)


async def step_ended(r: Run, st: Step) -> None:
    timeout = secs(st.get("withinMs"), STEP)
    for l in r.group(st["lease"]):
        if timeout == 0:
            check(l.lost.is_set(), f"the lease of {l.key!r} still lives")
        else:
            try:
                await asyncio.wait_for(l.lost.wait(), timeout)
            except asyncio.TimeoutError:
                raise ScenarioFailure(f"the lease of {l.key!r} did not end within {timeout:g} s") from None
        check((not st.get("reason") or l.lost_reason == st["reason"]) and not l.held,
              f"the lease of {l.key!r} ended {l.lost_reason!r} (held {l.held}), want {st.get('reason') or 'ended'}")


async def step_not_ended(r: Run, st: Step) -> None:
    not_ended(r.group(st["lease"]))


async def step_hold(r: Run, st: Step) -> None:
    """Hold for ms (the scenario's own duration, not a synchronisation), failing as soon as a lease ends."""
    ls = r.groups(st["leases"])
    ended = [asyncio.ensure_future(l.lost.wait()) for l in ls]
    try:
        await asyncio.wait(ended, timeout=st["ms"] / 1000.0, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in ended:
            t.cancel()
    for l in ls:
        check(not l.lost.is_set(), f"the lease of {l.key!r} was lost while held ({l.lost_reason})")
    not_ended(ls)


async def step_wanted(r: Run, st: Step) -> None:
    try:
        await asyncio.wait_for(r.one(st["lease"]).wanted.wait(), secs(st.get("withinMs"), STEP))
    except asyncio.TimeoutError:
        raise ScenarioFailure(f"no wanted signal on {st['lease']}") from None


async def step_signals_wanted(r: Run, st: Step) -> None:
    check(r.client(st["client"]).signals_wanted, "the gateway did not announce wanted pushes (Lockgate-Features)")


async def step_inspect(r: Run, st: Step) -> None:
    c = r.client(st["client"])
    key = r.key_of(st)

    async def once() -> Optional[str]:
        for l in r.groups([st["holder"]] if st.get("holder") else []):
            info = await c.inspect(l.key)
            if info.fencing_token != l.fencing_token or info.owner != l.owner:
                return f"inspect {l.key!r}: {info}, want owner {l.owner} token {l.fencing_token}"
        if st.get("free"):
            try:
                info = await c.inspect(key)
            except lockgate.NotFoundError:
                return None
            return f"{key!r} should be free, but inspect shows it held: {info}"
        if not any(k in st for k in ("waiters", "mode", "holders", "holderCount", "permits")):
            return None
        info = await c.inspect(key)
        if "waiters" in st and info.waiters != st["waiters"]:
            return f"inspect {key!r}: {info.waiters} waiters, want {st['waiters']}"
        if "mode" in st and info.mode != st["mode"]:
            return f"inspect {key!r}: mode {info.mode}, want {st['mode']}"
        if "permits" in st and info.permits != st["permits"]:
            return f"inspect {key!r}: permits {info.permits}, want {st['permits']}"
        if "holderCount" in st and len(info.holders) != st["holderCount"]:
            return f"inspect {key!r}: {len(info.holders)} holders, want {st['holderCount']}"
        if "holders" in st:
            want = [r.one(n).fencing_token for n in st["holders"]]
            if [h.fencing_token for h in info.holders] != want:
                return f"inspect {info}: holders' tokens, want {want} ({st['holders']})"
        return None

    timeout = secs(st.get("withinMs"), STEP)
    if not st.get("poll"):
        why = await once()
        check(why is None, why or "")
        return
    end = time.monotonic() + timeout
    last: Optional[str] = None
    while time.monotonic() < end:
        try:
            last = await once()
        except lockgate.LockgateError as e:
            last = f"{type(e).__name__}: {e}"
        if last is None:
            return
        await asyncio.sleep(0.02)
    raise ScenarioFailure(f"timed out after {timeout:g} s waiting for inspect of {key!r} (last: {last})")


async def step_mark(r: Run, st: Step) -> None:
    r.marks[st["as"]] = time.monotonic()


async def step_elapsed(r: Run, st: Step) -> None:
    d = (r.mark(st.get("to")) - r.mark(st["from"])) * 1000
    if "minMs" in st:
        check(d >= st["minMs"], f"{st['from']} to {st.get('to', 'now')} took {d:.0f} ms, want at least {st['minMs']}")
    if "maxMs" in st:
        check(d <= st["maxMs"], f"{st['from']} to {st.get('to', 'now')} took {d:.0f} ms, want at most {st['maxMs']}")


async def step_deadline(r: Run, st: Step) -> None:
    for l in r.group(st["lease"]):
        if st.get("record"):
            r.marks[st["record"]] = l.deadline
        if st.get("before"):
            check(l.deadline < r.mark(st["before"]),
                  f"the deadline of {l.key!r} is {(l.deadline - r.mark(st['before'])) * 1000:.0f} ms after {st['before']}, want before it")
        if st.get("after"):
            check(l.deadline > r.mark(st["after"]) + st.get("plusMs", 0) / 1000.0,
                  f"the deadline of {l.key!r} is not after {st['after']} + {st.get('plusMs', 0)} ms")
        if st.get("equalsSession"):
            s = r.session(st["equalsSession"])
            check(l.deadline == s.deadline, f"the lease of {l.key!r}: deadline {l.deadline}, its session's {s.deadline}")


async def step_kill_leader(r: Run, st: Step) -> None:
    killed = await r.control("POST", "/kill-leader")
    r.killed = killed.get("killed") or ""
    r.marks["killed"] = time.monotonic()


async def step_failed_over(r: Run, st: Step) -> None:
    check(bool(r.killed), "no killLeader step before")
    ep = await r.control("GET", "/endpoints")
    check(ep.get("leader") != r.killed and r.killed not in ep.get("endpoints", []), f"the killed leader {r.killed} still runs: {ep}")


async def step_renewed_since(r: Run, st: Step) -> None:
    """Wait until a renewal (keep-alive) sent after the mark was answered: the
    lease's (session's) sent moves past the mark."""
    m = r.mark(st["mark"])
    watch = r.groups(st.get("leases"))
    if st.get("session"):
        target: Any = r.session(st["session"])
    else:
        target = r.one(st["lease"])
        watch.append(target)
    timeout = secs(st.get("withinMs"), CALL)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for l in watch:
            check(not l.lost.is_set(), f"the lease of {l.key!r} was lost ({l.lost_reason}) after {st['mark']}")
        if target.sent > m:
            return
        await asyncio.sleep(0.02)
    raise ScenarioFailure(f"no renewal sent after {st['mark']} was answered within {timeout:g} s")


async def step_left_follower(r: Run, st: Step) -> None:
    c = r.client(st["client"])
    check(bool(r.follower) and c.endpoint != r.follower, f"the client still talks to the follower {r.follower}")


async def step_features(r: Run, st: Step) -> None:
    got = await r.client(st["client"]).features()
    check(got == st["want"], f"features {got}, want {st['want']}")


async def step_cache_stats(r: Run, st: Step) -> None:
    s = r.client(st["client"]).cache_stats()
    for k in ("hits", "reclaimed", "unused"):
        if k in st:
            check(getattr(s, k) == st[k], f"cache stats {s}, want {k} {st[k]}")


async def step_open_session(r: Run, st: Step) -> None:
    s = await asyncio.wait_for(r.client(st["client"]).open_session(st["ttlMs"] / 1000.0, keep_alive=st.get("keepAlive", True)),
                               secs(st.get("withinMs"), CALL))
    r.sessions[st["session"]] = s


async def step_close_session(r: Run, st: Step) -> None:
    await asyncio.wait_for(r.client(st["client"]).close_session(r.session(st["session"])), secs(st.get("withinMs"), CALL))


async def step_renew_session(r: Run, st: Step) -> None:
    err: Optional[BaseException] = None
    try:
        await asyncio.wait_for(r.client(st["client"]).renew_session(r.session(st["session"])), secs(st.get("withinMs"), CALL))
    except lockgate.LockgateError as e:
        err = e
    if st.get("expectError"):
        r.match_error(None, err, st, f"keep-alive of {st['session']}")
    elif err is not None:
        raise err


async def step_session_of(r: Run, st: Step) -> None:
    ls = r.group(st["lease"])
    s = ls[0].session
    check(s is not None, f"the lease of {ls[0].key!r} is in no session")
    assert s is not None
    check(all(l.session is s for l in ls), "not every lease is in the first one's session")
    if "ttlMs" in st:
        check(abs(s.ttl - st["ttlMs"] / 1000.0) < 1e-6, f"session {s}: TTL {s.ttl} s, want {st['ttlMs']} ms")
    if "leaseCount" in st:
        check(s.leases == st["leaseCount"], f"the session holds {s.leases} leases, want {st['leaseCount']}")
    if st.get("clientOwn"):
        check(r.client(st["clientOwn"]).session is s, f"the session is not client {st['clientOwn']}'s own")
    r.sessions[st["as"]] = s


async def step_ops(r: Run, st: Step) -> None:
    ops = (await r.control("GET", "/ops")).get("ops")
    check(ops is not None, "GET /ops: no ops")
    r.ops[st["as"]] = ops or {}


async def step_ops_delta(r: Run, st: Step) -> None:
    if st["from"] not in r.ops or st["to"] not in r.ops:
        raise ScenarioFailure(f"no ops {st['from']!r} or {st['to']!r}")
    d = r.ops[st["to"]].get(st["op"], 0) - r.ops[st["from"]].get(st["op"], 0)
    print(f"# {r.scenario['name']}: the server committed {d:g} {st['op']} ops from {st['from']} to {st['to']}", flush=True)
    if "min" in st:
        check(d >= st["min"], f"the server committed {d:g} {st['op']} ops, want at least {st['min']}")
    if "lessThan" in st:
        check(d < st["lessThan"], f"the server committed {d:g} {st['op']} ops, want fewer than {st['lessThan']}")


async def step_watch(r: Run, st: Step) -> None:
    w = r.client(st["client"]).watch(r.key_of(st))
    await asyncio.wait_for(w.start(), secs(st.get("withinMs"), CALL))
    r.watches[st["watch"]] = w


def watch_of(r: Run, name: str) -> lockgate.Watch:
    if name not in r.watches:
        raise ScenarioFailure(f"no watch {name!r}")
    return r.watches[name]


async def step_event(r: Run, st: Step) -> None:
    timeout = secs(st.get("withinMs"), STEP)
    try:
        ev = await asyncio.wait_for(watch_of(r, st["watch"]).next(), timeout)
    except asyncio.TimeoutError:
        raise ScenarioFailure(f"no event within {timeout:g} s") from None
    check(ev is not None, "the watch ended")
    name = st.get("holder") or st.get("token")
    l = r.one(name) if name else None
    token = l.fencing_token if l else None
    owner = l.owner if l and st.get("holder") else ""
    check(ev.type == st["type"] and ev.fencing_token == token and (not owner or ev.owner == owner)
          and ("value" not in st or ev.value == st["value"]) and ev.key == r.key_of(st),
          f"event {ev}; want {st['type']} token {token} owner {owner!r} value {st.get('value')!r}")
    if st.get("as"):
        r.events[st["as"]] = ev


async def step_close_watch(r: Run, st: Step) -> None:
    await watch_of(r, st["watch"]).aclose()


async def step_watch_ended(r: Run, st: Step) -> None:
    ev = await asyncio.wait_for(watch_of(r, st["watch"]).next(), secs(st.get("withinMs"), STEP))
    check(ev is None, f"a closed watch goes on: {ev}")


async def step_revisions_increase(r: Run, st: Step) -> None:
    for n in st["events"]:
        check(n in r.events, f"no event {n!r}")
    revs = [r.events[n].revision for n in st["events"]]
    check(all(a < b for a, b in zip(revs, revs[1:])), f"revisions {revs} of {st['events']}: want increasing")


def want_leader(r: Run, ld: Any, st: Step) -> None:
    if not st.get("lease"):
        check(not ld.present, f"leader {ld}; want nobody")
        return
    l = r.one(st["lease"])
    check(ld.present and ld.fencing_token == l.fencing_token and ("value" not in st or ld.value == st["value"]),
          f"leader {ld}; want {st['lease']}: token {l.fencing_token} value {st.get('value')!r}")


async def step_current(r: Run, st: Step) -> None:
    want_leader(r, await election.current(r.client(st["client"]), r.key_of(st)), st)


async def step_observe(r: Run, st: Step) -> None:
    r.observers[st["observer"]] = election.observe(r.client(st["client"]), r.key_of(st))


async def step_leader(r: Run, st: Step) -> None:
    if st["observer"] not in r.observers:
        raise ScenarioFailure(f"no observer {st['observer']!r}")
    timeout = secs(st.get("withinMs"), STEP)
    try:
        ld = await asyncio.wait_for(r.observers[st["observer"]].__anext__(), timeout)
    except asyncio.TimeoutError:
        raise ScenarioFailure(f"no leader reported within {timeout:g} s") from None
    except StopAsyncIteration:
        raise ScenarioFailure("observe ended") from None
    want_leader(r, ld, st)


STEPS: Dict[str, Callable[[Run, Step], Awaitable[None]]] = {
    "client": step_client,
    "acquire": acquire("acquire"),
    "tryAcquire": acquire("tryAcquire"),
    "acquireAll": acquire("acquireAll"),
    "tryAcquireAll": acquire("tryAcquireAll"),
    "campaign": step_campaign,
    "await": step_await,
    "pending": step_pending,
    "cancel": step_cancel,
    "release": step_release,
    "releaseRebuilt": step_release_rebuilt,
    "resign": step_resign,
    "tokenAbove": step_token_above,
    "checkLease": step_check_lease,
    "ended": step_ended,
    "notEnded": step_not_ended,
    "hold": step_hold,
    "wanted": step_wanted,
    "signalsWanted": step_signals_wanted,
    "inspect": step_inspect,
    "mark": step_mark,
    "elapsed": step_elapsed,
    "deadline": step_deadline,
    "killLeader": step_kill_leader,
    "failedOver": step_failed_over,
    "renewedSince": step_renewed_since,
    "leftFollower": step_left_follower,
    "features": step_features,
    "cacheStats": step_cache_stats,
    "openSession": step_open_session,
    "closeSession": step_close_session,
    "renewSession": step_renew_session,
    "sessionOf": step_session_of,
    "ops": step_ops,
    "opsDelta": step_ops_delta,
    "watch": step_watch,
    "event": step_event,
    "closeWatch": step_close_watch,
    "watchEnded": step_watch_ended,
    "revisionsIncrease": step_revisions_increase,
    "current": step_current,
    "observe": step_observe,
    "leader": step_leader,
}


async def run_scenario(r: Run) -> None:
    """Interpret r's scenario, step by step (the caller closes r)."""
    for i, st in enumerate(r.scenario["steps"], start=1):
        f = STEPS.get(st.get("do"))
        if f is None:
            raise ScenarioFailure(f"step {i}: unknown step kind {st.get('do')!r}: the Python runner does not implement it")
        try:
            await f(r, st)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raise ScenarioFailure(f"step {i} ({st['do']}): {type(e).__name__}: {e}") from e
