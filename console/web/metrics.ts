/**
 * The Prometheus text format as the console needs it: samples
 * (`name{labels} value`), sums of a metric's series, and what the
 * sparklines plot — rates of counters and the mean commit latency between
 * two scrapes. No DOM here, so it is unit-tested under Node
 * (console/web/test/metrics.test.ts).
 */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/**
 * parseMetrics reads the Prometheus text exposition format: one sample per
 * line, `name{label="value",…} value [timestamp]`; comment (`#`) and blank
 * lines are skipped, as are lines it cannot read.
 */
export function parseMetrics(text: string): Sample[] {
  const out: Sample[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const s = parseLine(line);
    if (s) out.push(s);
  }
  return out;
}

function parseLine(line: string): Sample | undefined {
  let i = 0;
  while (i < line.length && /[A-Za-z0-9_:]/.test(line[i]!)) i++;
  const name = line.slice(0, i);
  if (name === "" || /^[0-9]/.test(name)) return undefined;
  const labels: Record<string, string> = {};
  if (line[i] === "{") {
    i++;
    for (;;) {
      while (line[i] === " " || line[i] === ",") i++;
      if (i >= line.length) return undefined;
      if (line[i] === "}") {
        i++;
        break;
      }
      const start = i;
      while (i < line.length && /[A-Za-z0-9_]/.test(line[i]!)) i++;
      const label = line.slice(start, i);
      while (line[i] === " ") i++;
      if (label === "" || line[i] !== "=") return undefined;
      i++;
      while (line[i] === " ") i++;
      if (line[i] !== '"') return undefined;
      i++;
      let v = "";
      for (;;) {
        if (i >= line.length) return undefined;
        const c = line[i]!;
        if (c === '"') {
          i++;
          break;
        }
        if (c === "\\" && i + 1 < line.length) {
          const n = line[i + 1]!;
          v += n === "n" ? "\n" : n;
          i += 2;
          continue;
        }
        v += c;
        i++;
      }
      labels[label] = v;
    }
  }
  const rest = line.slice(i).trim().split(/\s+/);
  if (rest.length === 0 || rest[0] === "") return undefined;
  const value = parseValue(rest[0]!);
  if (value === undefined) return undefined;
  return { name, labels, value };
}

function parseValue(s: string): number | undefined {
  switch (s) {
    case "+Inf":
    case "Inf":
      return Infinity;
    case "-Inf":
      return -Infinity;
    case "NaN":
      return NaN;
  }
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(s)) return undefined;
  return Number(s);
}

/**
 * sumOf adds the values of every series of `name` whose labels include
 * `match` (a node's metrics carry a `node` label; an embedded cluster
 * exposes several nodes on one /metrics). undefined when there is none.
 */
export function sumOf(samples: readonly Sample[], name: string, match: Record<string, string> = {}): number | undefined {
  let sum: number | undefined;
  outer: for (const s of samples) {
    if (s.name !== name) continue;
    for (const [k, v] of Object.entries(match)) if (s.labels[k] !== v) continue outer;
    if (!Number.isFinite(s.value)) continue;
    sum = (sum ?? 0) + s.value;
  }
  return sum;
}

/** What the console reads from one scrape of /metrics. */
export interface Snapshot {
  /** When it was taken (ms, any monotonic clock). */
  at: number;
  /** Grants so far: lockgate_raftlock_ops_total{op="acquire"} + lockgate_grants_total (undefined if neither is exposed). */
  grants: number | undefined;
  /** Waiting acquires: lockgate_raftlock_waiters, else lockgate_waiters. */
  waiters: number | undefined;
  /** lockgate_raft_commit_seconds_sum and _count. */
  commitSum: number | undefined;
  commitCount: number | undefined;
}

export function snapshotOf(samples: readonly Sample[], at: number): Snapshot {
  const ops = sumOf(samples, "lockgate_raftlock_ops_total", { op: "acquire" });
  const grants = sumOf(samples, "lockgate_grants_total");
  return {
    at,
    grants: ops === undefined && grants === undefined ? undefined : (ops ?? 0) + (grants ?? 0),
    waiters: sumOf(samples, "lockgate_raftlock_waiters") ?? sumOf(samples, "lockgate_waiters"),
    commitSum: sumOf(samples, "lockgate_raft_commit_seconds_sum"),
    commitCount: sumOf(samples, "lockgate_raft_commit_seconds_count"),
  };
}

/**
 * rate is a counter's increase per second between two readings; null when
 * either is missing, no time passed, or the counter went down (a restart).
 */
export function rate(prev: number | undefined, cur: number | undefined, seconds: number): number | null {
  if (prev === undefined || cur === undefined || !(seconds > 0)) return null;
  const d = cur - prev;
  if (d < 0) return null;
  return d / seconds;
}

/**
 * meanLatencyMs is the mean of the observations a histogram (or summary)
 * took between two readings of its _sum (seconds) and _count, in ms; null
 * when nothing was observed in between, a reading is missing, or the
 * counters went down.
 */
export function meanLatencyMs(prevSum: number | undefined, prevCount: number | undefined, curSum: number | undefined, curCount: number | undefined): number | null {
  if (prevSum === undefined || prevCount === undefined || curSum === undefined || curCount === undefined) return null;
  const dc = curCount - prevCount;
  const ds = curSum - prevSum;
  if (dc <= 0 || ds < 0) return null;
  return (ds / dc) * 1000;
}

/** The three sparkline points between two snapshots. */
export interface Point {
  grantsPerSec: number | null;
  waiters: number | null;
  commitMs: number | null;
}

export function pointBetween(prev: Snapshot | undefined, cur: Snapshot): Point {
  const seconds = prev ? (cur.at - prev.at) / 1000 : 0;
  return {
    grantsPerSec: prev ? rate(prev.grants, cur.grants, seconds) : null,
    waiters: cur.waiters ?? null,
    commitMs: prev ? meanLatencyMs(prev.commitSum, prev.commitCount, cur.commitSum, cur.commitCount) : null,
  };
}

/** Series keeps the last `max` points of one sparkline (null: no value then). */
export class Series {
  readonly max: number;
  readonly points: (number | null)[] = [];
  constructor(max = 60) {
    this.max = max;
  }
  push(v: number | null): void {
    this.points.push(v);
    while (this.points.length > this.max) this.points.shift();
  }
  get last(): number | null {
    return this.points.length ? this.points[this.points.length - 1]! : null;
  }
  clear(): void {
    this.points.length = 0;
  }
}
