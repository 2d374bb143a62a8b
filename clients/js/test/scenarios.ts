/**
 * The TypeScript runner of clients/scenarios: an interpreter of the scenarios'
 * steps (the vocabulary: clients/scenarios/README.md; the Go runner,
 * clients/scenarios_steps_go_test.go, and the Python runner interpret the same
 * steps). runScenario throws why a scenario failed.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import {
  CancelledError,
  Client,
  DelayedError,
  HeldError,
  LockgateError,
  NotHeldError,
  PermitsMismatchError,
  SessionExpiredError,
  TimeoutError,
  election,
  type ClientOptions,
  type Lease,
  type Leadership,
  type Session,
  type Watch,
  type WatchEvent,
} from "../src/index.js";

/** Step is one step of a scenario: `do` names its kind, the other fields are its arguments. */
export type Step = { do: string } & Record<string, any>;

export interface Scenario {
  name: string;
  doc?: string;
  steps: Step[];
}

/** loadScenarios reads every NAME.json of dir, in the order of the names. */
export function loadScenarios(dir: string): Scenario[] {
  const files = readdirSync(dir).filter((f) => f.endsWith(".json")).sort();
  const out: Scenario[] = [];
  for (const f of files) {
    const s = JSON.parse(readFileSync(join(dir, f), "utf8")) as Scenario;
    if (s.name !== f.slice(0, -".json".length)) throw new Error(`${f}: name ${s.name}, want the file's name`);
    if (!Array.isArray(s.steps) || s.steps.length === 0) throw new Error(`${f}: no steps`);
    out.push(s);
  }
  if (out.length === 0) throw new Error(`${dir}: no scenario (NAME.json)`);
  return out;
}

/** Env is what a run needs from the harness. */
export interface Env {
  endpoints: string[];
  control: string;
  run: string;
}

interface EndpointsBody {
  endpoints: string[];
  leader: string;
  follower: string;
}

/** Pending is a call in flight: an acquire, an acquire-all or a campaign. */
interface Pending {
  p: Promise<Lease[] | Leadership>;
  done: boolean;
  at: number;
  ctl: AbortController;
  keys: string[];
  client: Client;
}

const CALL_MS = 15_000; // a call's default bound
const WAIT_MS = 10_000; // the default bound of a wait for something pushed

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const to = new Promise<never>((_, rej) => (timer = setTimeout(() => rej(new Error(`${what}: no answer within ${ms} ms`)), ms)));
  try {
    return await Promise.race([p, to]);
  } finally {
    clearTimeout(timer);
  }
}

/** pollUntil calls cond every 10 ms until it returns true or ms pass (then the last reason is thrown); a Stop thrown ends it at once. */
class Stop extends Error {}
async function pollUntil(what: string, ms: number, cond: () => Promise<true | string>): Promise<void> {
  const end = performance.now() + ms;
  let last = "";
  for (;;) {
    try {
      const r = await cond();
      if (r === true) return;
      last = r;
    } catch (e) {
      if (e instanceof Stop) throw new Error(`waiting for ${what}: ${e.message}`);
      last = (e as Error).message;
    }
    if (performance.now() > end) throw new Error(`waiting for ${what}: gave up after ${ms} ms (last: ${last})`);
    await sleep(10);
  }
}

function fmt(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) => (typeof x === "bigint" ? x.toString() : x));
}

/** The error classes of the codes that have their own. */
const errorClass: Record<string, new (...a: any[]) => LockgateError> = {
  held: HeldError,
  not_held: NotHeldError,
  timeout: TimeoutError,
  cancelled: CancelledError,
  delayed: DelayedError,
  permits_mismatch: PermitsMismatchError,
  session_expired: SessionExpiredError,
};

/** Run is one scenario's run: its key and what its steps named. */
export class Run {
  readonly key: string;
  clients = new Map<string, Client>();
  leases = new Map<string, Lease[]>();
  leaseClient = new Map<Lease, Client>();
  leaderships = new Map<string, Leadership>();
  pending = new Map<string, Pending>();
  sessions = new Map<string, Session>();
  watches = new Map<string, { w: Watch; ctl: AbortController }>();
  observers = new Map<string, { it: AsyncGenerator<election.Leader, void, undefined>; ctl: AbortController }>();
  events = new Map<string, WatchEvent>();
  marks = new Map<string, number>();
  ops = new Map<string, Record<string, number>>();
  follower = "";
  killed = "";

  constructor(readonly env: Env, readonly s: Scenario) {
    this.key = `clients/js/${env.run}/${s.name}`;
  }

  async control<T>(method: string, path: string): Promise<T> {
    const res = await fetch(this.env.control + path, { method, signal: AbortSignal.timeout(60_000) });
    const body = await res.text();
    if (!res.ok) throw new Error(`control ${method} ${path}: ${res.status}: ${body}`);
    return JSON.parse(body) as T;
  }

  async close(): Promise<void> {
    for (const p of this.pending.values()) p.ctl.abort();
    for (const { ctl } of this.watches.values()) ctl.abort();
    for (const { ctl, it } of this.observers.values()) {
      ctl.abort();
      await it.return(undefined).catch(() => {});
    }
    await Promise.allSettled([...this.clients.values()].map((c) => c.close()));
    if (this.killed) await this.control("POST", "/restore");
  }

  client(name: string): Client {
    const c = this.clients.get(name);
    if (!c) throw new Error(`no client ${name} (a client step opens it)`);
    return c;
  }

  group(name: string): Lease[] {
    const ls = this.leases.get(name);
    if (!ls || ls.length === 0) throw new Error(`no lease ${name} (not granted, or not yet awaited)`);
    return ls;
  }

  one(name: string): Lease {
    const ls = this.group(name);
    if (ls.length !== 1) throw new Error(`${name} names ${ls.length} leases, want one (name one as ${name}.0)`);
    return ls[0]!;
  }

  groups(names: string[] = []): Lease[] {
    return names.flatMap((n) => this.group(n));
  }

  mark(name: string | undefined): number {
    if (!name || name === "now") return performance.now();
    const m = this.marks.get(name);
    if (m === undefined) throw new Error(`no time mark ${name}`);
    return m;
  }

  session(name: string): Session {
    const s = this.sessions.get(name);
    if (!s) throw new Error(`no session ${name}`);
    return s;
  }

  /** keyOf is the key a step names: the scenario's key with its suffix ("{i}": i), its raw key, or a key of keyBytes bytes. */
  keyOf(st: Step, i = 0): string {
    if (st.rawKey !== undefined) return st.rawKey as string;
    if (st.keyBytes) return "k".repeat(st.keyBytes as number);
    if (st.key !== undefined) return this.key + (st.key as string).replaceAll("{i}", String(i));
    return this.key;
  }

  /** start runs call in the background as the pending call name, marking name.sent now and name.answered when it settles. */
  start(name: string, client: Client, keys: string[], ctl: AbortController, call: () => Promise<Lease[] | Leadership>): Pending {
    this.marks.set(`${name}.sent`, performance.now());
    const p = call();
    const op: Pending = { p, done: false, at: 0, ctl, keys, client };
    const settle = () => ((op.done = true), (op.at = performance.now()));
    p.then(settle, settle);
    this.pending.set(name, op);
    return op;
  }

  /** finish waits up to ms for the pending call name and judges its outcome by st: the error st expects, or a grant, bound to name. */
  async finish(name: string, op: Pending, st: Step, ms: number): Promise<void> {
    let got: Lease[] | Leadership | undefined;
    let err: unknown;
    try {
      got = await within(op.p, ms, name);
    } catch (e) {
      if (!op.done) throw e; // no answer in time
      err = e;
    }
    this.pending.delete(name);
    this.marks.set(`${name}.answered`, op.at);
    if (st.expectError) return this.matchError(got, err, st, name);
    if (err !== undefined) throw new Error(`${name}: ${(err as Error).name}: ${(err as Error).message}`);
    let ls: Lease[];
    if (Array.isArray(got)) {
      ls = got;
    } else {
      this.leaderships.set(name, got!);
      ls = [got!.lease];
    }
    if (ls.length !== op.keys.length) throw new Error(`${name}: ${ls.length} leases for ${op.keys.length} keys`);
    for (const [i, l] of ls.entries()) {
      if (l.key !== op.keys[i] || l.fencingToken === 0n) throw new Error(`${name}: lease ${i}: key ${l.key} token ${l.fencingToken}; want ${op.keys[i]} with a token`);
      this.leaseClient.set(l, op.client);
    }
    if (st.sameAs) {
      const first = this.one(st.sameAs);
      if (ls[0] !== first || ls[0]!.fencingToken !== first.fencingToken) {
        throw new Error(`${name}: token ${ls[0]!.fencingToken}, a lease other than ${st.sameAs}'s (token ${first.fencingToken}); want the same lease`);
      }
    }
    this.bind(name, ls);
  }

  bind(name: string, ls: Lease[]): void {
    this.leases.set(name, ls);
    if (ls.length > 1) ls.forEach((l, i) => this.leases.set(`${name}.${i}`, [l]));
  }

  /** matchError checks an outcome against st's expectError (the error's code, and its class where the code has one) and details. */
  matchError(got: unknown, err: unknown, st: Step, what: string): void {
    const code = st.expectError as string;
    if (err === undefined) throw new Error(`${what}: succeeded (${fmt(got instanceof Object && "fencingToken" in got ? (got as Lease).fencingToken : got)}), want ${code}`);
    const cls = errorClass[code] ?? LockgateError;
    if (!(err instanceof cls) || (err as LockgateError).code !== code) {
      throw new Error(`${what}: ${(err as Error).name}: ${(err as Error).message} (code ${(err as LockgateError).code}), want ${cls.name} code ${code}`);
    }
    if (err instanceof HeldError && st.holder) {
      const l = this.one(st.holder);
      if (err.holder.owner !== l.owner || err.holder.fencingToken !== l.fencingToken) {
        throw new Error(`${what}: held names ${fmt(err.holder)}, want ${st.holder}: ${l.owner} token ${l.fencingToken}`);
      }
    }
    if (err instanceof DelayedError && st.retryInMaxMs) {
      if (!(err.retryInMs > 0 && err.retryInMs <= st.retryInMaxMs)) throw new Error(`${what}: retryInMs ${err.retryInMs}: want within (0, ${st.retryInMaxMs}]`);
    }
  }
}

function ended(l: Lease): boolean {
  return l.reason !== undefined;
}

function notEnded(ls: Lease[]): void {
  for (const l of ls) {
    if (ended(l) || l.signal.aborted || !l.held) throw new Error(`the lease of ${l.key} reports ${l.reason ?? "its deadline passed"}`);
  }
}

async function acquire(r: Run, st: Step, kind: "acquire" | "tryAcquire" | "acquireAll" | "tryAcquireAll"): Promise<void> {
  const c = r.client(st.client);
  const opts: Record<string, unknown> = {};
  for (const k of ["ttlMs", "autoRenew", "waitMs", "mode", "permits", "value", "lockDelayMs"]) if (st[k] !== undefined) opts[k] = st[k];
  if (st.session) opts.session = r.session(st.session);
  const all = kind === "acquireAll" || kind === "tryAcquireAll";
  const calls: Array<{ name: string; keys: string[] }> = all
    ? [{ name: st.lease, keys: (st.keys as string[]).map((k) => r.key + k) }]
    : st.count
      ? Array.from({ length: st.count as number }, (_, i) => ({ name: `${st.lease}.${i}`, keys: [r.keyOf(st, i)] }))
      : [{ name: st.lease, keys: [r.keyOf(st)] }];
  const granted: Lease[] = [];
  for (const { name, keys } of calls) {
    const ctl = new AbortController();
    const o = { ...opts, signal: ctl.signal };
    const op = r.start(name, c, keys, ctl, async () => {
      switch (kind) {
        case "acquireAll":
          return c.acquireAll(keys, o);
        case "tryAcquireAll":
          return c.tryAcquireAll(keys, o);
        case "tryAcquire":
          return [await c.tryAcquire(keys[0]!, o)];
        default:
          return [await c.acquire(keys[0]!, o)];
      }
    });
    op.p.catch(() => {}); // judged by finish
    if (st.async) continue;
    await r.finish(name, op, st, st.withinMs ?? CALL_MS);
    if (st.count && !st.expectError) granted.push(...r.group(name));
  }
  if (st.count && !st.async && !st.expectError) r.leases.set(st.lease, granted);
}

function wantLeader(r: Run, ld: { present: boolean; fencingToken?: bigint; value?: string }, st: Step): void {
  if (!st.lease) {
    if (ld.present) throw new Error(`leader ${fmt(ld)}, want nobody`);
    return;
  }
  const l = r.one(st.lease);
  if (!ld.present || ld.fencingToken !== l.fencingToken || (st.value !== undefined && ld.value !== st.value)) {
    throw new Error(`leader ${fmt(ld)}, want ${st.lease}: token ${l.fencingToken} value ${st.value}`);
  }
}

/** The step kinds, by name (the vocabulary of clients/scenarios/README.md). */
export const steps: Record<string, (r: Run, st: Step) => Promise<void>> = {
  async client(r, st) {
    let endpoints = r.env.endpoints;
    if (st.endpoints === "follower") {
      const ep = await r.control<EndpointsBody>("GET", "/endpoints");
      r.follower = ep.follower;
      endpoints = [ep.follower];
    } else if (st.endpoints && st.endpoints !== "all") throw new Error(`endpoints ${st.endpoints}: want all or follower`);
    const t0 = performance.now();
    const name = st.as as string;
    const logger = process.env.LOCKGATE_JS_DEBUG ? (m: string) => console.log(`# ${Math.round(performance.now() - t0)}ms ${name}: ${m}`) : undefined;
    const opts: ClientOptions = { clientId: `js-${name}-${r.env.run}`, ...(logger ? { logger } : {}) };
    if (st.cacheLeases) opts.cacheLeases = true;
    if (st.sessionTtlMs) opts.sessionTtlMs = st.sessionTtlMs;
    if (r.clients.has(name)) throw new Error(`client ${name} opened twice`);
    r.clients.set(name, new Client(endpoints, opts));
  },
  acquire: (r, st) => acquire(r, st, "acquire"),
  tryAcquire: (r, st) => acquire(r, st, "tryAcquire"),
  acquireAll: (r, st) => acquire(r, st, "acquireAll"),
  tryAcquireAll: (r, st) => acquire(r, st, "tryAcquireAll"),
  async campaign(r, st) {
    const c = r.client(st.client);
    const ctl = new AbortController();
    const key = r.keyOf(st);
    const op = r.start(st.lease, c, [key], ctl, () => election.campaign(c, key, st.value ?? "", { ttlMs: st.ttlMs, signal: ctl.signal }));
    op.p.catch(() => {});
    if (!st.async) await r.finish(st.lease, op, st, st.withinMs ?? CALL_MS);
  },
  async await(r, st) {
    const op = r.pending.get(st.lease);
    if (!op) throw new Error(`no pending call ${st.lease}`);
    await r.finish(st.lease, op, st, st.withinMs ?? WAIT_MS);
  },
  async pending(r, st) {
    const op = r.pending.get(st.lease);
    if (!op) throw new Error(`no pending call ${st.lease}`);
    await sleep(0); // let a settled answer's callbacks run
    if (op.done) throw new Error(`${st.lease} answered already`);
  },
  async cancel(r, st) {
    const op = r.pending.get(st.lease);
    if (!op) throw new Error(`no pending call ${st.lease}`);
    op.ctl.abort();
  },
  async release(r, st) {
    for (const l of r.group(st.lease)) {
      let err: unknown;
      try {
        await within(l.release(), st.withinMs ?? CALL_MS, `release of ${l.key}`);
      } catch (e) {
        err = e;
      }
      if (st.expectError) r.matchError(undefined, err, st, `release of ${l.key}`);
      else if (err !== undefined) throw err;
    }
  },
  async releaseRebuilt() {
    // The TypeScript client has no public way to rebuild a lease from its
    // grant (a Lease is made by the client only): the step is the Go and
    // Python runners' (README, "Where a runner cannot").
    console.log("# releaseRebuilt: not expressible with the TypeScript client's public API");
  },
  async resign(r, st) {
    const ld = r.leaderships.get(st.lease);
    if (!ld) throw new Error(`no leadership ${st.lease}`);
    await within(ld.resign(), st.withinMs ?? CALL_MS, `resign of ${st.lease}`);
  },
  async tokenAbove(r, st) {
    const l = r.one(st.lease), o = r.one(st.above);
    if (l.fencingToken <= o.fencingToken) throw new Error(`${st.lease}'s token ${l.fencingToken} is not above ${st.above}'s ${o.fencingToken}`);
  },
  async checkLease(r, st) {
    for (const l of r.group(st.lease)) {
      if (st.mode !== undefined && l.mode !== st.mode) throw new Error(`lease of ${l.key}: mode ${l.mode}, want ${st.mode}`);
      if (st.permits !== undefined && l.permits !== st.permits) throw new Error(`lease of ${l.key}: ${l.permits} permits, want ${st.permits}`);
      if (st.autoRenew !== undefined && l.autoRenew !== st.autoRenew) throw new Error(`lease of ${l.key}: autoRenew ${l.autoRenew}, want ${st.autoRenew}`);
    }
  },
  async ended(r, st) {
    for (const l of r.group(st.lease)) {
      const ms = st.withinMs ?? WAIT_MS;
      if (ms === 0 && !ended(l)) throw new Error(`the lease of ${l.key} still lives`);
      const why = ms === 0 ? l.reason : await within(l.lost, ms, `the end of the lease of ${l.key}`);
      if ((st.reason && why !== st.reason) || !l.signal.aborted || l.held) {
        throw new Error(`the lease of ${l.key} ended ${why} (signal aborted: ${l.signal.aborted}, held: ${l.held}), want ${st.reason ?? "ended"}`);
      }
    }
  },
  async notEnded(r, st) {
    notEnded(r.group(st.lease));
  },
  async hold(r, st) {
    const ls = r.groups(st.leases);
    const lost = await Promise.race([...ls.map((l) => l.lost.then((why) => `${l.key}: ${why}`)), sleep(st.ms).then(() => undefined)]);
    if (lost !== undefined) throw new Error(`a lease was lost while held: ${lost}`);
    notEnded(ls);
  },
  async wanted(r, st) {
    await within(r.one(st.lease).wanted, st.withinMs ?? WAIT_MS, `the wanted signal of ${st.lease}`);
  },
  async signalsWanted(r, st) {
    if (!r.client(st.client).signalsWanted) throw new Error("the gateway did not announce wanted pushes (Lockgate-Features)");
  },
  async inspect(r, st) {
    const c = r.client(st.client);
    const key = r.keyOf(st);
    const check = async (): Promise<true | string> => {
      if (st.holder) {
        for (const l of r.group(st.holder)) {
          const info = await c.inspect(l.key);
          if (!info || info.fencingToken !== l.fencingToken || info.owner !== l.owner) return `inspect ${l.key}: ${fmt(info)}, want owner ${l.owner} token ${l.fencingToken}`;
        }
      }
      if (st.free) {
        const info = await c.inspect(key);
        return info === null ? true : `inspect ${key}: want not_found, got ${fmt(info)}`;
      }
      if (st.waiters === undefined && st.mode === undefined && st.holders === undefined && st.holderCount === undefined && st.permits === undefined) return true;
      const info = await c.inspect(key);
      if (!info) return `inspect ${key}: not found`;
      if (st.waiters !== undefined && info.waiters !== st.waiters) return `inspect ${key}: ${info.waiters} waiters, want ${st.waiters}`;
      if (st.mode !== undefined && info.mode !== st.mode) return `inspect ${key}: mode ${info.mode}, want ${st.mode}`;
      if (st.permits !== undefined && info.permits !== st.permits) return `inspect ${key}: permits ${info.permits}, want ${st.permits}`;
      if (st.holderCount !== undefined && info.holders.length !== st.holderCount) return `inspect ${key}: ${info.holders.length} holders, want ${st.holderCount}`;
      if (st.holders !== undefined) {
        const want = (st.holders as string[]).map((n) => r.one(n).fencingToken);
        const got = info.holders.map((h) => h.fencingToken);
        if (fmt(got) !== fmt(want)) return `inspect ${key}: holders' tokens ${fmt(got)}, want ${fmt(want)} (${fmt(st.holders)})`;
      }
      return true;
    };
    if (st.poll) return pollUntil(`inspect of ${key}`, st.withinMs ?? WAIT_MS, check);
    const res = await check();
    if (res !== true) throw new Error(res);
  },
  async mark(r, st) {
    r.marks.set(st.as, performance.now());
  },
  async elapsed(r, st) {
    const d = r.mark(st.to) - r.mark(st.from);
    if (st.minMs !== undefined && d < st.minMs) throw new Error(`${st.from} to ${st.to ?? "now"} took ${Math.round(d)} ms, want at least ${st.minMs}`);
    if (st.maxMs !== undefined && d > st.maxMs) throw new Error(`${st.from} to ${st.to ?? "now"} took ${Math.round(d)} ms, want at most ${st.maxMs}`);
  },
  async deadline(r, st) {
    for (const l of r.group(st.lease)) {
      if (st.record) r.marks.set(st.record, l.deadline);
      if (st.before && !(l.deadline < r.mark(st.before))) throw new Error(`the deadline of ${l.key} is ${Math.round(l.deadline - r.mark(st.before))} ms after ${st.before}, want before it`);
      if (st.after && !(l.deadline > r.mark(st.after) + (st.plusMs ?? 0))) throw new Error(`the deadline of ${l.key} is not after ${st.after} + ${st.plusMs ?? 0} ms`);
      if (st.equalsSession) {
        const s = r.session(st.equalsSession);
        if (l.deadline !== s.deadline) throw new Error(`the lease of ${l.key}: deadline ${l.deadline}, its session's ${s.deadline}`);
      }
    }
  },
  async killLeader(r) {
    const { killed } = await r.control<{ killed: string }>("POST", "/kill-leader");
    r.killed = killed;
    r.marks.set("killed", performance.now());
  },
  async failedOver(r) {
    if (!r.killed) throw new Error("no killLeader step before");
    const ep = await r.control<EndpointsBody>("GET", "/endpoints");
    if (ep.leader === r.killed || ep.endpoints.includes(r.killed)) throw new Error(`the killed leader ${r.killed} still runs: ${fmt(ep)}`);
  },
  async renewedSince(r, st) {
    // A renewal (keep-alive) sent after the mark moves the deadline past
    // mark + TTL (deadline = sent + TTL − drift): it was answered.
    const m = r.mark(st.mark);
    const watch = r.groups(st.leases);
    let target: { deadline: number; ttlMs: number };
    if (st.session) target = r.session(st.session);
    else watch.push((target = r.one(st.lease)));
    await pollUntil(`a renewal sent after ${st.mark}`, st.withinMs ?? CALL_MS, async () => {
      const gone = watch.find(ended);
      if (gone) throw new Stop(`the lease of ${gone.key} was lost: ${gone.reason}`);
      const ttl = target.ttlMs;
      return target.deadline > m + ttl - (ttl * 0.01 + 2) ? true : `deadline ${Math.round(target.deadline - m)} ms after ${st.mark}`;
    });
  },
  async leftFollower(r, st) {
    const c = r.client(st.client);
    if (!r.follower || c.endpoint === r.follower) throw new Error(`the client still talks to the follower ${r.follower}`);
  },
  async features(r, st) {
    const got = await r.client(st.client).features();
    if (fmt(got) !== fmt(st.want)) throw new Error(`features ${fmt(got)}, want ${fmt(st.want)}`);
  },
  async cacheStats(r, st) {
    const s = r.client(st.client).cacheStats();
    for (const k of ["hits", "reclaimed", "unused"] as const) {
      if (st[k] !== undefined && s[k] !== st[k]) throw new Error(`cache stats ${fmt(s)}, want ${k} ${st[k]}`);
    }
  },
  async openSession(r, st) {
    const s = await within(r.client(st.client).openSession({ ttlMs: st.ttlMs, keepAlive: st.keepAlive ?? true }), st.withinMs ?? CALL_MS, "open session");
    r.sessions.set(st.session, s);
  },
  async closeSession(r, st) {
    await within(r.client(st.client).closeSession(r.session(st.session)), st.withinMs ?? CALL_MS, "close session");
  },
  async renewSession(r, st) {
    let err: unknown;
    try {
      await within(r.client(st.client).renewSession(r.session(st.session)), st.withinMs ?? CALL_MS, "renew session");
    } catch (e) {
      err = e;
    }
    if (st.expectError) r.matchError(undefined, err, st, `keep-alive of ${st.session}`);
    else if (err !== undefined) throw err;
  },
  async sessionOf(r, st) {
    const ls = r.group(st.lease);
    const s = ls[0]!.session;
    if (!s) throw new Error(`the lease of ${ls[0]!.key} is in no session`);
    for (const l of ls) if (l.session !== s) throw new Error(`the lease of ${l.key} is not in the session of ${ls[0]!.key}`);
    if (st.ttlMs !== undefined && s.ttlMs !== st.ttlMs) throw new Error(`session ${s.id} ttl ${s.ttlMs}, want ${st.ttlMs}`);
    if (st.leaseCount !== undefined && s.leases !== st.leaseCount) throw new Error(`the session holds ${s.leases} leases, want ${st.leaseCount}`);
    if (st.clientOwn && r.client(st.clientOwn).session !== s) throw new Error(`the session ${s.id} is not client ${st.clientOwn}'s own`);
    r.sessions.set(st.as, s);
  },
  async ops(r, st) {
    const { ops } = await r.control<{ ops: Record<string, number> }>("GET", "/ops");
    if (!ops) throw new Error("GET /ops: no ops");
    r.ops.set(st.as, ops);
  },
  async opsDelta(r, st) {
    const from = r.ops.get(st.from), to = r.ops.get(st.to);
    if (!from || !to) throw new Error(`no ops ${st.from} or ${st.to}`);
    const d = (to[st.op] ?? 0) - (from[st.op] ?? 0);
    console.log(`# ${r.s.name}: the server committed ${d} ${st.op} ops from ${st.from} to ${st.to}`);
    if (st.min !== undefined && d < st.min) throw new Error(`the server committed ${d} ${st.op} ops, want at least ${st.min}`);
    if (st.lessThan !== undefined && d >= st.lessThan) throw new Error(`the server committed ${d} ${st.op} ops, want fewer than ${st.lessThan}`);
  },
  async watch(r, st) {
    const ctl = new AbortController();
    const w = await within(r.client(st.client).watch(r.keyOf(st), { signal: ctl.signal }), st.withinMs ?? CALL_MS, "watch");
    r.watches.set(st.watch, { w, ctl });
  },
  async event(r, st) {
    const w = r.watches.get(st.watch);
    if (!w) throw new Error(`no watch ${st.watch}`);
    const ev = await within(w.w.next(), st.withinMs ?? WAIT_MS, `the next event of ${st.watch}`);
    if (!ev) throw new Error("the watch ended");
    const l = st.holder || st.token ? r.one(st.holder || st.token) : undefined;
    const owner = st.holder ? l!.owner : "";
    if (ev.type !== st.type || ev.fencingToken !== l?.fencingToken || (owner && ev.owner !== owner) || (st.value !== undefined && ev.value !== st.value) || ev.key !== r.keyOf(st)) {
      throw new Error(`event ${fmt(ev)}; want ${st.type} token ${l?.fencingToken} owner ${owner} value ${st.value}`);
    }
    if (st.as) r.events.set(st.as, ev);
  },
  async closeWatch(r, st) {
    const w = r.watches.get(st.watch);
    if (!w) throw new Error(`no watch ${st.watch}`);
    w.ctl.abort();
  },
  async watchEnded(r, st) {
    const w = r.watches.get(st.watch);
    if (!w) throw new Error(`no watch ${st.watch}`);
    const ev = await within(w.w.next(), st.withinMs ?? WAIT_MS, `the end of ${st.watch}`);
    if (ev !== undefined) throw new Error(`a closed watch goes on: ${fmt(ev)}`);
  },
  async revisionsIncrease(r, st) {
    const revs = (st.events as string[]).map((n) => {
      const ev = r.events.get(n);
      if (!ev) throw new Error(`no event ${n}`);
      return ev.revision;
    });
    for (let i = 1; i < revs.length; i++) if (!(revs[i - 1]! < revs[i]!)) throw new Error(`revisions ${fmt(revs)} of ${fmt(st.events)}: want increasing`);
  },
  async current(r, st) {
    wantLeader(r, await election.current(r.client(st.client), r.keyOf(st)), st);
  },
  async observe(r, st) {
    const ctl = new AbortController();
    r.observers.set(st.observer, { it: election.observe(r.client(st.client), r.keyOf(st), { signal: ctl.signal }), ctl });
  },
  async leader(r, st) {
    const o = r.observers.get(st.observer);
    if (!o) throw new Error(`no observer ${st.observer}`);
    const it = await within(o.it.next(), st.withinMs ?? WAIT_MS, `the next leader of ${st.observer}`);
    if (it.done) throw new Error("observe ended");
    wantLeader(r, it.value, st);
  },
};

/** runScenario interprets s's steps, then closes what they opened (and restores the cluster after a killLeader). */
export async function runScenario(env: Env, s: Scenario): Promise<void> {
  const r = new Run(env, s);
  try {
    for (const [i, st] of s.steps.entries()) {
      const f = steps[st.do];
      if (!f) throw new Error(`step ${i + 1}: unknown step kind ${st.do}: the TypeScript runner does not implement it`);
      try {
        await f(r, st);
      } catch (e) {
        throw new Error(`step ${i + 1} (${st.do}): ${(e as Error).message}`);
      }
    }
  } finally {
    await r.close();
  }
}
