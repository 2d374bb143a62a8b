/**
 * The TypeScript runner's implementations of clients/scenarios/scenarios.json
 * (their meaning: the scenario set all three clients share, mirrored by the Go
 * runner in clients/scenarios_go_test.go and the Python runner). Each throws
 * why it failed.
 */
import {
  Client,
  DelayedError,
  HeldError,
  LockgateError,
  NotHeldError,
  PermitsMismatchError,
  SessionExpiredError,
  TimeoutError,
  CancelledError,
  election,
  type ClientOptions,
  type Lease,
  type Watch,
  type WatchEvent,
} from "../src/index.js";

export interface Scenario {
  name: string;
  ttlMs?: number;
  waitMs?: number;
  leases?: number;
}

/** Env is what a run needs from the harness. */
export interface Env {
  endpoints: string[];
  control: string;
  run: string;
}

/** Run is one scenario's run: its key and its clients, closed by close(). */
export class Run {
  readonly key: string;
  #clients: Client[] = [];
  #restore = false;
  constructor(readonly env: Env, readonly s: Scenario) {
    this.key = `clients/js/${env.run}/${s.name}`;
  }

  client(name: string, endpoints: string[] = this.env.endpoints, opts: ClientOptions = {}): Client {
    const t0 = performance.now();
    const logger = process.env.LOCKGATE_JS_DEBUG ? (m: string) => console.log(`# ${Math.round(performance.now() - t0)}ms ${name}: ${m}`) : undefined;
    const c = new Client(endpoints, { clientId: `js-${name}-${this.env.run}`, ...(logger ? { logger } : {}), ...opts });
    this.#clients.push(c);
    return c;
  }

  get ttlMs(): number {
    return this.s.ttlMs ?? 10_000;
  }

  async control<T>(method: string, path: string): Promise<T> {
    if (path !== "/endpoints") this.#restore = true;
    const res = await fetch(this.env.control + path, { method, signal: AbortSignal.timeout(60_000) });
    const body = await res.text();
    if (!res.ok) throw new Error(`control ${method} ${path}: ${res.status}: ${body}`);
    return JSON.parse(body) as T;
  }

  /** The harness's GET /ops: the lock operations the nodes committed as leaders, by op. */
  async ops(): Promise<Record<string, number>> {
    const { ops } = await this.control<{ ops: Record<string, number> }>("GET", "/ops");
    return ops;
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.#clients.map((c) => c.close()));
    if (this.#restore) await this.control("POST", "/restore");
  }
}

interface EndpointsBody {
  endpoints: string[];
  leader: string;
  follower: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** settled tracks a promise's outcome so that a scenario can check it has not answered yet. */
function track<T>(p: Promise<T>): { p: Promise<T>; done: boolean; at: number } {
  const t = { p, done: false, at: 0 };
  p.then(
    () => ((t.done = true), (t.at = performance.now())),
    () => ((t.done = true), (t.at = performance.now())),
  );
  return t;
}

async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const to = new Promise<never>((_, rej) => (timer = setTimeout(() => rej(new Error(`${what}: no answer within ${ms} ms`)), ms)));
  try {
    return await Promise.race([p, to]);
  } finally {
    clearTimeout(timer);
  }
}

/** pollUntil calls cond every 10 ms until it returns true or ms pass (then the last reason is thrown). */
async function pollUntil(what: string, ms: number, cond: () => Promise<true | string>): Promise<void> {
  const end = performance.now() + ms;
  let last = "";
  for (;;) {
    try {
      const r = await cond();
      if (r === true) return;
      last = r;
    } catch (e) {
      last = (e as Error).message;
    }
    if (performance.now() > end) throw new Error(`waiting for ${what}: gave up after ${ms} ms (last: ${last})`);
    await sleep(10);
  }
}

async function waiters(c: Client, key: string, n: number): Promise<void> {
  await pollUntil(`${n} waiter(s) on ${key}`, 10_000, async () => {
    const info = await c.inspect(key);
    return info?.waiters === n ? true : `${info?.waiters ?? "no holder, so no"} waiters`;
  });
}

async function free(c: Client, key: string): Promise<void> {
  const info = await c.inspect(key);
  if (info !== null) throw new Error(`inspect ${key}: want not_found, got ${fmt(info)}`);
}

async function holds(c: Client, l: Lease): Promise<void> {
  const info = await c.inspect(l.key);
  if (!info || info.fencingToken !== l.fencingToken || info.owner !== l.owner) {
    throw new Error(`inspect ${l.key}: ${fmt(info)}, want owner ${l.owner} token ${l.fencingToken}`);
  }
}

function fmt(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) => (typeof x === "bigint" ? x.toString() : x));
}

async function expectError<E extends LockgateError>(p: Promise<unknown>, type: new (...a: any[]) => E, what: string): Promise<E> {
  try {
    const v = await p;
    throw new Error(`${what}: succeeded (${fmt((v as Lease | undefined)?.fencingToken)}), want ${type.name}`);
  } catch (e) {
    if (e instanceof type) return e;
    throw new Error(`${what}: ${(e as Error).name}: ${(e as Error).message}, want ${type.name}`);
  }
}

async function expectCode(p: Promise<unknown>, code: string, what: string): Promise<void> {
  try {
    await p;
  } catch (e) {
    if (e instanceof LockgateError && e.code === code) return;
    throw new Error(`${what}: ${(e as Error).message}, want code ${code}`);
  }
  throw new Error(`${what}: succeeded, want code ${code}`);
}

export const scenarios: Record<string, (r: Run) => Promise<void>> = {
  async "contention-pushed-grant"(r) {
    const a = r.client("A"), b = r.client("B");
    const la = await a.acquire(r.key, { ttlMs: r.ttlMs });
    const bp = track(b.acquire(r.key, { ttlMs: r.ttlMs }));
    await waiters(a, r.key, 1);
    if (bp.done) throw new Error("B's acquire answered while A holds");
    await la.release();
    const lb = await within(bp.p, 10_000, "B's acquire after A's release");
    if (lb.fencingToken <= la.fencingToken) throw new Error(`B's token ${lb.fencingToken} is not larger than A's ${la.fencingToken}`);
    await lb.release();
  },

  async "fifo-three"(r) {
    const a = r.client("A");
    const la = await a.acquire(r.key, { ttlMs: r.ttlMs });
    const names = ["B", "C", "D"];
    const clients = names.map((n) => r.client(n));
    const waits: Array<ReturnType<typeof track<Lease>>> = [];
    for (const [i, c] of clients.entries()) {
      waits.push(track(c.acquire(r.key, { ttlMs: r.ttlMs })));
      await waiters(a, r.key, i + 1);
    }
    await la.release();
    let prev = la.fencingToken;
    for (const [i, n] of names.entries()) {
      const l = await within(waits[i]!.p, 10_000, `${n}'s acquire`);
      for (let j = i + 1; j < names.length; j++) {
        if (waits[j]!.done) throw new Error(`${names[j]} answered before ${n} released`);
      }
      if (l.fencingToken <= prev) throw new Error(`${n}'s token ${l.fencingToken} is not larger than the previous ${prev}`);
      prev = l.fencingToken;
      await l.release();
    }
    await free(a, r.key);
  },

  async expiry(r) {
    const a = r.client("A"), b = r.client("B");
    const ttl = r.ttlMs;
    const sent = performance.now();
    const la = await a.acquire(r.key, { ttlMs: ttl });
    if (la.autoRenew) throw new Error("a lease with an explicit ttlMs renews itself by default");
    const lb = await within(b.acquire(r.key, { ttlMs: 10_000 }), 10_000 + ttl, "B's acquire");
    const at = performance.now();
    if (at - sent < ttl - ttl / 10) throw new Error(`B granted ${Math.round(at - sent)} ms after A's acquire was sent, before A's TTL ${ttl} ms less 10 %`);
    if (!(la.deadline < at)) throw new Error(`A's deadline is ${Math.round(la.deadline - at)} ms after B's grant`);
    const why = await within(la.lost, 5_000, "A's lost signal");
    if (why !== "expired" || !la.signal.aborted) throw new Error(`A's lease ended ${why} (signal aborted: ${la.signal.aborted}), want expired`);
    if (lb.fencingToken <= la.fencingToken) throw new Error(`B's token ${lb.fencingToken} is not larger than A's ${la.fencingToken}`);
    await lb.release();
  },

  async renew(r) {
    const a = r.client("A");
    const la = await a.acquire(r.key, { ttlMs: r.ttlMs, autoRenew: true });
    const lost = await Promise.race([la.lost, sleep(4 * r.ttlMs).then(() => undefined)]); // the scenario's hold
    if (lost !== undefined) throw new Error(`the lease was lost while held: ${lost}`);
    await holds(a, la);
    if (!la.held) throw new Error(`the lease reports ${la.reason ?? "its deadline passed"}`);
    await la.release();
  },

  async "stale-release"(r) {
    const a = r.client("A"), b = r.client("B");
    const la = await a.acquire(r.key, { ttlMs: r.ttlMs });
    await la.release();
    if ((await la.lost) !== "released") throw new Error("a released lease does not say released");
    const lb = await b.acquire(r.key, { ttlMs: r.ttlMs });
    await expectError(la.release(), NotHeldError, "A's second release");
    await holds(a, lb);
    await lb.release();
  },

  async "try-acquire-held"(r) {
    const a = r.client("A"), b = r.client("B");
    const la = await a.acquire(r.key, { ttlMs: r.ttlMs });
    const e = await expectError(b.tryAcquire(r.key, { ttlMs: r.ttlMs }), HeldError, "B's try-acquire");
    if (e.code !== "held" || e.holder.owner !== la.owner || e.holder.fencingToken !== la.fencingToken) {
      throw new Error(`held names ${fmt(e.holder)}, want A: ${la.owner} token ${la.fencingToken}`);
    }
    await la.release();
  },

  async "wait-timeout"(r) {
    const a = r.client("A"), b = r.client("B");
    const wait = r.s.waitMs ?? 300;
    const la = await a.acquire(r.key, { ttlMs: r.ttlMs });
    const start = performance.now();
    const e = await expectError(b.acquire(r.key, { ttlMs: r.ttlMs, waitMs: wait }), TimeoutError, "B's acquire with waitMs");
    const took = performance.now() - start;
    if (e.code !== "timeout" || took < wait || took > wait + 3_000) throw new Error(`B's acquire failed (${e.code}) after ${Math.round(took)} ms, want between ${wait} and ${wait + 3000}`);
    await waiters(a, r.key, 0);
    await la.release();
    await free(a, r.key);
  },

  async cancel(r) {
    const a = r.client("A"), b = r.client("B");
    const la = await a.acquire(r.key, { ttlMs: r.ttlMs });
    const ctl = new AbortController();
    const bp = b.acquire(r.key, { ttlMs: r.ttlMs, signal: ctl.signal });
    await waiters(a, r.key, 1);
    ctl.abort();
    const e = await within(expectError(bp, CancelledError, "B's cancelled acquire"), 5_000, "B's cancelled acquire");
    if (e.code !== "cancelled") throw new Error(`code ${e.code}`);
    const info = await a.inspect(r.key);
    if (info?.waiters !== 0) throw new Error(`after the cancel: ${fmt(info)}, want 0 waiters`);
    await la.release();
    await free(a, r.key);
  },

  async "redirect-from-follower"(r) {
    const ep = await r.control<EndpointsBody>("GET", "/endpoints");
    const c = r.client("F", [ep.follower]);
    const l = await c.acquire(r.key, { ttlMs: r.ttlMs });
    if (c.endpoint === ep.follower) throw new Error(`the client still talks to the follower ${ep.follower}`);
    await holds(r.client("check"), l);
    await l.release();
    await free(c, r.key);
  },

  async "leader-killed-while-holding"(r) {
    const a = r.client("A");
    const ttl = r.ttlMs;
    const la = await a.acquire(r.key, { ttlMs: ttl, autoRenew: true });
    const { killed } = await r.control<{ killed: string }>("POST", "/kill-leader");
    // A renewal sent after the kill moves the deadline past kill + ttl
    // (deadline = sent + ttl − drift): the new leader answered it.
    const killedAt = performance.now();
    await pollUntil("a renewal after the kill", 15_000, async () => {
      if (la.reason) throw new Error(`lost: ${la.reason}`);
      return la.deadline > killedAt + ttl - (ttl * 0.01 + 2) ? true : `deadline ${Math.round(la.deadline - killedAt)} ms after the kill`;
    });
    if (la.reason) throw new Error(`the lease was reported lost: ${la.reason}`);
    await holds(a, la);
    const ep = await r.control<EndpointsBody>("GET", "/endpoints");
    if (ep.leader === killed || ep.endpoints.includes(killed)) throw new Error(`the killed leader ${killed} still runs: ${fmt(ep)}`);
    await la.release();
  },

  async "leader-killed-while-waiting"(r) {
    const a = r.client("A"), b = r.client("B");
    const ttl = r.ttlMs;
    const la = await a.acquire(r.key, { ttlMs: ttl, autoRenew: true });
    const bp = b.acquire(r.key, { ttlMs: ttl });
    bp.catch(() => {}); // judged below
    await waiters(a, r.key, 1);
    const { killed } = await r.control<{ killed: string }>("POST", "/kill-leader");
    await la.release();
    const lb = await within(bp, 15_000, "B's acquire");
    if (lb.fencingToken <= la.fencingToken) throw new Error(`B's token ${lb.fencingToken} is not larger than A's ${la.fencingToken}`);
    const ep = await r.control<EndpointsBody>("GET", "/endpoints");
    if (ep.leader === killed || ep.endpoints.includes(killed)) throw new Error(`the killed leader ${killed} still runs: ${fmt(ep)}`);
    await lb.release();
  },

  // A released lease stays with A's cache (still held on the server), comes
  // back with the same token without a round trip, and is reclaimed the
  // moment B waits for the key.
  async "lease-cache"(r) {
    const a = r.client("A", r.env.endpoints, { cacheLeases: true }), b = r.client("B");
    const opts = { ttlMs: r.ttlMs, autoRenew: true };
    const la = await a.acquire(r.key, opts);
    await la.release();
    if (!a.signalsWanted) throw new Error("the gateway did not announce wanted pushes (Lockgate-Features): the cache cannot keep leases");
    try {
      await holds(b, la);
    } catch (e) {
      throw new Error(`after A's release the cache should keep the lease: ${(e as Error).message}`);
    }
    const again = await a.acquire(r.key, opts);
    if (again !== la || again.fencingToken !== la.fencingToken || a.cacheStats().hits !== 1) {
      throw new Error(`A's second acquire: token ${again.fencingToken} (first ${la.fencingToken}), stats ${fmt(a.cacheStats())}; want the cached lease`);
    }
    await again.release();
    const lb = await within(b.acquire(r.key, { ttlMs: r.ttlMs }), 10_000, "B's acquire of A's cached key");
    if (lb.fencingToken <= la.fencingToken) throw new Error(`B's token ${lb.fencingToken} is not larger than A's ${la.fencingToken}`);
    const why = await within(la.lost, 5_000, "A's reclaimed lease ending");
    if (why !== "released" || !la.signal.aborted) throw new Error(`A's lease ended ${why} (signal aborted: ${la.signal.aborted}), want released`);
    const st = a.cacheStats();
    if (st.reclaimed !== 1) throw new Error(`A's stats ${fmt(st)}, want 1 reclaimed`);
    await lb.release();
  },

  async "bad-input"(r) {
    const c = r.client("A");
    for (const [what, key, ttlMs, code] of [
      ["empty key", "", 1000, "invalid_key"],
      ["key of 1025 bytes", "k".repeat(1025), 1000, "invalid_key"],
      ["ttl 5 ms", r.key, 5, "invalid_ttl"],
    ] as const) {
      await expectCode(c.acquire(key, { ttlMs }), code, `acquire with ${what}`);
      await expectCode(c.tryAcquire(key, { ttlMs }), code, `try-acquire with ${what}`);
    }
    await free(c, r.key);
  },
  // The primitives' scenarios (clients/scenarios_primitives_go_test.go has their meaning).

  async "shared-readers"(r) {
    const a = r.client("A"), b = r.client("B"), c = r.client("C");
    const feats = await a.features();
    const all = ["wanted", "shared", "semaphore", "multikey", "watch", "lockdelay", "sessions", "watchprefix"];
    if (fmt(feats) !== fmt(all)) throw new Error(`features ${fmt(feats)}, want ${fmt(all)}`);
    const la = await a.acquire(r.key, { ttlMs: r.ttlMs, mode: "shared" });
    const lb = await b.tryAcquire(r.key, { ttlMs: r.ttlMs, mode: "shared" });
    if (la.mode !== "shared" || lb.mode !== "shared" || lb.fencingToken <= la.fencingToken) {
      throw new Error(`leases A ${la.mode}/${la.fencingToken}, B ${lb.mode}/${lb.fencingToken}: want shared, B's token above A's`);
    }
    const info = await c.inspect(r.key);
    if (info?.mode !== "shared" || info.holders.length !== 2 || info.holders[0]!.fencingToken !== la.fencingToken || info.holders[1]!.fencingToken !== lb.fencingToken) {
      throw new Error(`inspect ${fmt(info)}: want mode shared, holders A (${la.fencingToken}) then B (${lb.fencingToken})`);
    }
    await expectError(c.tryAcquire(r.key, { ttlMs: r.ttlMs }), HeldError, "C's exclusive try-acquire beside two readers");
    const cp = track(c.acquire(r.key, { ttlMs: r.ttlMs }));
    await waiters(a, r.key, 1);
    await la.release();
    if (cp.done) throw new Error("C's exclusive acquire answered while B still reads");
    await holds(c, lb);
    await lb.release();
    const lc = await within(cp.p, 10_000, "C's exclusive acquire after both releases");
    if (lc.mode !== "exclusive" || lc.fencingToken <= lb.fencingToken) throw new Error(`C's lease ${lc.mode}/${lc.fencingToken}: want exclusive above ${lb.fencingToken}`);
    await lc.release();
  },

  async "semaphore-permits"(r) {
    const a = r.client("A"), b = r.client("B"), c = r.client("C");
    const sem = { ttlMs: r.ttlMs, permits: 2 };
    const la = await a.acquire(r.key, sem);
    const lb = await b.acquire(r.key, sem);
    if (la.permits !== 2 || lb.permits !== 2 || la.mode !== "shared") throw new Error(`permits A ${la.permits} (${la.mode}), B ${lb.permits}: want 2, shared`);
    const info = await c.inspect(r.key);
    if (info?.permits !== 2 || info.holders.length !== 2) throw new Error(`inspect ${fmt(info)}: want permits 2 with 2 holders`);
    await expectError(c.tryAcquire(r.key, sem), HeldError, "C's third permit");
    await expectError(c.tryAcquire(r.key, { ttlMs: r.ttlMs, permits: 3 }), PermitsMismatchError, "C with 3 permits on a semaphore of 2");
    const cp = track(c.acquire(r.key, sem));
    await waiters(a, r.key, 1);
    await la.release();
    const lc = await within(cp.p, 10_000, "C's permit after A's release");
    if (lc.permits !== 2 || lc.fencingToken <= lb.fencingToken) throw new Error(`C's permit: ${lc.permits} permits, token ${lc.fencingToken}; want 2, above ${lb.fencingToken}`);
    await lb.release();
    await lc.release();
    await free(a, r.key);
  },

  async "acquire-all"(r) {
    const a = r.client("A"), b = r.client("B");
    const keys = [1, 2, 3].map((i) => `${r.key}/${i}`);
    const la = await a.acquire(keys[1]!, { ttlMs: r.ttlMs });
    await expectError(b.tryAcquireAll(keys, { ttlMs: r.ttlMs }), HeldError, `B's try of ${fmt(keys)} with one held`);
    await free(a, keys[0]!);
    await free(a, keys[2]!);
    const bp = track(b.acquireAll(keys, { ttlMs: r.ttlMs }));
    await waiters(a, keys[1]!, 1);
    if (bp.done) throw new Error(`B's acquire-all answered while A holds ${keys[1]}`);
    await la.release();
    const ls = await within(bp.p, 10_000, "B's acquire-all after A's release");
    if (ls.length !== keys.length) throw new Error(`B got ${ls.length} leases for ${keys.length} keys`);
    for (const [i, l] of ls.entries()) {
      if (l.key !== keys[i] || l.fencingToken === 0n) throw new Error(`lease ${i}: key ${l.key} token ${l.fencingToken}; want ${keys[i]} with a token`);
      await holds(a, l);
    }
    if (ls[1]!.fencingToken <= la.fencingToken) throw new Error(`B's token for ${keys[1]} is ${ls[1]!.fencingToken}, not above A's ${la.fencingToken}`);
    for (const l of ls) await l.release();
    for (const k of keys) await free(a, k);
  },

  async watch(r) {
    const a = r.client("A"), w = r.client("W");
    const ctl = new AbortController();
    try {
      const events = await w.watch(r.key, { signal: ctl.signal });
      const seen: string[] = [];
      const want = async (type: string, token: bigint | undefined, owner = "", value = ""): Promise<WatchEvent> => {
        const ev = await within(events.next(), 10_000, `the event after ${fmt(seen)}`);
        if (!ev) throw new Error(`the watch ended after ${fmt(seen)}`);
        seen.push(ev.type);
        if (ev.type !== type || ev.fencingToken !== token || (owner && ev.owner !== owner) || (value && ev.value !== value) || ev.key !== r.key) {
          throw new Error(`after ${fmt(seen.slice(0, -1))}: event ${fmt(ev)}; want ${type} token ${token} owner ${owner} value ${value}`);
        }
        return ev;
      };
      await want("synced", undefined);
      const la = await a.acquire(r.key, { ttlMs: 10_000, value: "v1" });
      const g = await want("granted", la.fencingToken, la.owner, "v1");
      const second: Watch = await w.watch(r.key, { signal: ctl.signal });
      const h = await within(second.next(), 10_000, "the second watch's first event");
      if (h?.type !== "holder" || h.fencingToken !== la.fencingToken || h.owner !== la.owner) throw new Error(`second watch's first event ${fmt(h)}: want holder A`);
      const sy = await within(second.next(), 10_000, "the second watch's second event");
      if (sy?.type !== "synced") throw new Error(`second watch's second event ${fmt(sy)}: want synced`);
      second.close();
      await la.release();
      const rel = await want("released", la.fencingToken);
      const lx = await a.acquire(r.key, { ttlMs: r.ttlMs });
      const g2 = await want("granted", lx.fencingToken, lx.owner);
      const ex = await want("expired", lx.fencingToken);
      if (!(g.revision < rel.revision && rel.revision < g2.revision && g2.revision < ex.revision)) {
        throw new Error(`revisions ${g.revision}, ${rel.revision}, ${g2.revision}, ${ex.revision}: want increasing`);
      }
      ctl.abort();
      if ((await within(events.next(), 5_000, "the aborted watch")) !== undefined) throw new Error("an aborted watch goes on");
      await free(a, r.key);
    } finally {
      ctl.abort();
    }
  },

  async "lock-delay"(r) {
    const a = r.client("A"), b = r.client("B");
    const delay = 1500;
    const la = await a.acquire(r.key, { ttlMs: r.ttlMs, lockDelayMs: delay });
    await within(la.lost, 10_000, "A's lease to end");
    await pollUntil("A's lease to expire on the server", 10_000, async () => ((await b.inspect(r.key)) === null ? true : "still held"));
    const freed = performance.now();
    const e = await expectError(b.tryAcquire(r.key, { ttlMs: 10_000 }), DelayedError, "B's try within the lock-delay");
    if (!(e.retryInMs > 0 && e.retryInMs <= delay)) throw new Error(`retryInMs ${e.retryInMs}: want within (0, ${delay}]`);
    const lb = await within(b.acquire(r.key, { ttlMs: 10_000 }), 15_000, "B's waiting acquire");
    const since = performance.now() - freed;
    if (since > delay + 5_000) throw new Error(`B granted ${Math.round(since)} ms after the key was freed: want about the delay ${delay} ms`);
    if (lb.fencingToken <= la.fencingToken) throw new Error(`B's token ${lb.fencingToken} not above A's ${la.fencingToken}`);
    await lb.release();
  },

  async election(r) {
    const a = r.client("A"), b = r.client("B"), o = r.client("O");
    const cur0 = await election.current(o, r.key);
    if (cur0.present) throw new Error(`current before any campaign: ${fmt(cur0)}; want nobody`);
    const ctl = new AbortController();
    const leaders = election.observe(o, r.key, { signal: ctl.signal });
    try {
      const seen: string[] = [];
      const expect = async (present: boolean, token = 0n, value = "") => {
        const it = await within(leaders.next(), 10_000, `the leader after ${fmt(seen)}`);
        if (it.done) throw new Error(`observe ended after ${fmt(seen)}`);
        const ld = it.value;
        seen.push(`${ld.present}/${ld.fencingToken}/${ld.value ?? ""}`);
        if (ld.present !== present || (present && (ld.fencingToken !== token || ld.value !== value))) {
          throw new Error(`leaders ${fmt(seen)}: the last want present ${present} token ${token} value ${value}`);
        }
      };
      await expect(false);
      const ea = await election.campaign(a, r.key, "a", { ttlMs: r.ttlMs });
      await expect(true, ea.fencingToken, "a");
      const cur = await election.current(o, r.key);
      if (!cur.present || cur.fencingToken !== ea.fencingToken || cur.value !== "a") throw new Error(`current while A leads: ${fmt(cur)}`);
      const bp = track(election.campaign(b, r.key, "b", { ttlMs: r.ttlMs }));
      await waiters(o, r.key, 1);
      await ea.resign();
      const eb = await within(bp.p, 10_000, "B's campaign after A's resignation");
      if (eb.fencingToken <= ea.fencingToken) throw new Error(`B's term ${eb.fencingToken} not above A's ${ea.fencingToken}`);
      await expect(false);
      await expect(true, eb.fencingToken, "b");
      await eb.resign();
      await expect(false);
      const end = await election.current(o, r.key);
      if (end.present) throw new Error(`current after both resigned: ${fmt(end)}; want nobody`);
    } finally {
      ctl.abort();
      await leaders.return(undefined);
    }
  },
  // The sessions' scenarios (clients/scenarios_sessions_go_test.go has their meaning).

  async "session-many-leases"(r) {
    const ttl = r.ttlMs;
    const a = r.client("A", r.env.endpoints, { sessionTtlMs: ttl });
    const before = await r.ops();
    const keys = Array.from({ length: r.s.leases ?? 20 }, (_, i) => `${r.key}/${i}`);
    const leases: Lease[] = [];
    for (const k of keys) leases.push(await a.acquire(k));
    const s = a.session;
    if (!s || s.ttlMs !== ttl) throw new Error(`A's own session ${s?.id} ttl ${s?.ttlMs}: want one with TTL ${ttl}`);
    for (const l of leases) if (l.session !== s) throw new Error(`the lease of ${l.key} is not in A's session`);
    if (s.leases !== keys.length) throw new Error(`the session holds ${s.leases} leases, want ${keys.length}`);
    const lost = await Promise.race([...leases.map((l) => l.lost.then((why) => `${l.key}: ${why}`)), sleep(4 * ttl).then(() => undefined)]);
    if (lost !== undefined) throw new Error(`a lease was lost while held: ${lost}`);
    for (const l of leases) {
      if (!l.held) throw new Error(`the lease of ${l.key} reports ${l.reason ?? "its deadline passed"}`);
      await holds(a, l);
    }
    const after = await r.ops();
    const keepAlives = (after["session-renew"] ?? 0) - (before["session-renew"] ?? 0);
    const renewals = (after["renew"] ?? 0) - (before["renew"] ?? 0);
    console.log(`session-many-leases: ${keys.length} leases held ${4 * ttl} ms: ${keepAlives} session keep-alives, ${renewals} lease renewals on the server (${s.renewals} here)`);
    if (keepAlives < 3 || renewals >= keys.length) {
      throw new Error(`the server committed ${keepAlives} session keep-alives and ${renewals} lease renewals while ${keys.length} leases were held: want ≥ 3 keep-alives and fewer renewals than leases`);
    }
    for (const l of leases) await l.release();
  },

  async "session-close-releases"(r) {
    const a = r.client("A"), b = r.client("B");
    const keys = [0, 1].map((i) => `${r.key}/${i}`);
    const s = await a.openSession({ ttlMs: r.ttlMs });
    const las: Lease[] = [];
    for (const k of keys) las.push(await a.acquire(k, { session: s }));
    const bp = track(b.acquire(keys[0]!, { ttlMs: r.ttlMs }));
    await waiters(a, keys[0]!, 1);
    if (bp.done) throw new Error("B's acquire answered while A's session holds the key");
    await a.closeSession(s);
    const lb = await within(bp.p, 10_000, "B's acquire after A closed its session");
    if (lb.fencingToken <= las[0]!.fencingToken) throw new Error(`B's token ${lb.fencingToken} is not larger than A's ${las[0]!.fencingToken}`);
    for (const l of las) {
      if (l.reason !== "released" || !l.signal.aborted) throw new Error(`A's lease of ${l.key} ended ${l.reason}, want released`);
    }
    await free(a, keys[1]!);
    await expectError(a.renewSession(s), SessionExpiredError, "A's keep-alive of the closed session");
    await lb.release();
  },

  async "session-expiry"(r) {
    const a = r.client("A"), b = r.client("B");
    const keys = [0, 1, 2].map((i) => `${r.key}/${i}`);
    const s = await a.openSession({ ttlMs: r.ttlMs, keepAlive: false });
    const las: Lease[] = [];
    for (const k of keys) las.push(await a.acquire(k, { session: s }));
    const bp = track(b.acquire(keys[0]!, { ttlMs: 10_000 }));
    for (const l of las) {
      const why = await within(l.lost, r.ttlMs + 5_000, `A's lease of ${l.key} to end`);
      if (why !== "expired") throw new Error(`A's lease of ${l.key} ended ${why}, want expired`);
    }
    const lb = await within(bp.p, 10_000, "B's acquire after A's session expired");
    if (bp.at < las[0]!.deadline) throw new Error(`B granted ${Math.round(las[0]!.deadline - bp.at)} ms before A's deadline`);
    if (lb.fencingToken <= las[0]!.fencingToken) throw new Error(`B's token ${lb.fencingToken} is not larger than A's ${las[0]!.fencingToken}`);
    for (const k of keys.slice(1)) {
      await pollUntil(`${k} to be free`, 10_000, async () => ((await b.inspect(k)) === null ? true : "still held"));
    }
    await expectError(a.renewSession(s), SessionExpiredError, "A's keep-alive of the expired session");
    await lb.release();
  },

  async "session-leader-killed"(r) {
    const ttl = r.ttlMs;
    const a = r.client("A", r.env.endpoints, { sessionTtlMs: ttl });
    const las: Lease[] = [];
    for (const k of [0, 1, 2].map((i) => `${r.key}/${i}`)) las.push(await a.acquire(k));
    const s = las[0]!.session;
    if (!s) throw new Error("A's lease is in no session");
    const { killed } = await r.control<{ killed: string }>("POST", "/kill-leader");
    const killedAt = performance.now();
    await pollUntil("a keep-alive after the kill", 15_000, async () => {
      const gone = las.find((l) => l.reason);
      if (gone) throw new Error(`the lease of ${gone.key} was lost: ${gone.reason}`);
      return s.deadline > killedAt + ttl - (ttl * 0.01 + 2) ? true : `session deadline ${Math.round(s.deadline - killedAt)} ms after the kill`;
    });
    const ep = await r.control<EndpointsBody>("GET", "/endpoints");
    if (ep.leader === killed || ep.endpoints.includes(killed)) throw new Error(`the killed leader ${killed} still runs: ${fmt(ep)}`);
    for (const l of las) {
      if (l.reason || l.deadline !== s.deadline) throw new Error(`the lease of ${l.key}: ${l.reason ?? "deadline " + l.deadline + ", its session's " + s.deadline}`);
      await holds(a, l);
    }
    for (const l of las) await l.release();
  },
};
