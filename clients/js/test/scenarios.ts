/**
 * The TypeScript runner's implementations of clients/scenarios/scenarios.json
 * (their meaning: the shared scenario set of issue 21, mirrored by the Go
 * runner in clients/scenarios_go_test.go and the Python runner). Each throws
 * why it failed.
 */
import { Client, HeldError, LockgateError, NotHeldError, TimeoutError, CancelledError, type ClientOptions, type Lease } from "../src/index.js";

export interface Scenario {
  name: string;
  ttlMs?: number;
  waitMs?: number;
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
};
