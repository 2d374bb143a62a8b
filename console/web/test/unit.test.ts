/**
 * Unit tests of the console's pure modules (metrics parsing and rates,
 * text formatting, sparkline paths). Run from the repository root:
 *
 *   make console   # installs clients/js's TypeScript if needed
 *   clients/js/node_modules/.bin/tsc -p console/web/test/tsconfig.json
 *   echo '{"type":"module"}' > clients/js/node_modules/.console-test/package.json
 *   node --test clients/js/node_modules/.console-test/test/
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { meanLatencyMs, parseMetrics, pointBetween, rate, Series, snapshotOf, sumOf } from "../metrics.js";
import { durationText, modeText, numberText, ttlText } from "../format.js";
import { sparkPath } from "../sparkline.js";

const scrape = (grants: number, ops: number, waiters: number, sum: number, count: number) => `# HELP lockgate_raftlock_ops_total Operations this node committed as leader, by op.
# TYPE lockgate_raftlock_ops_total counter
lockgate_raftlock_ops_total{node="n1",op="acquire"} ${ops}
lockgate_raftlock_ops_total{node="n1",op="renew"} 123456
lockgate_raftlock_ops_total{node="n2",op="acquire"} 0
# TYPE lockgate_grants_total counter
lockgate_grants_total ${grants}
lockgate_raftlock_waiters{node="n1"} ${waiters}
lockgate_waiters 999
lockgate_raft_commit_seconds_bucket{node="n1",le="0.0001"} 0
lockgate_raft_commit_seconds_bucket{node="n1",le="+Inf"} ${count}
lockgate_raft_commit_seconds_sum{node="n1"} ${sum}
lockgate_raft_commit_seconds_count{node="n1"} ${count}
`;

test("parseMetrics reads names, labels and values; skips comments and junk", () => {
  const s = parseMetrics(`# comment
a 1
b{x="1",y="two words"} 2.5
c{q="with \\"quote\\" and \\\\ and \\n",} 3e2 1700000000000
d{le="+Inf"} +Inf
e NaN

not a sample
{x="1"} 4
f{x="unterminated} 5
g -0.5
`);
  assert.deepEqual(s.map((x) => x.name), ["a", "b", "c", "d", "e", "g"]);
  assert.deepEqual(s[1]!.labels, { x: "1", y: "two words" });
  assert.equal(s[1]!.value, 2.5);
  assert.deepEqual(s[2]!.labels, { q: 'with "quote" and \\ and \n' });
  assert.equal(s[2]!.value, 300);
  assert.equal(s[3]!.value, Infinity);
  assert.ok(Number.isNaN(s[4]!.value));
  assert.equal(s[5]!.value, -0.5);
});

test("sumOf adds the matching series", () => {
  const s = parseMetrics(scrape(10, 7, 3, 1, 2));
  assert.equal(sumOf(s, "lockgate_raftlock_ops_total", { op: "acquire" }), 7);
  assert.equal(sumOf(s, "lockgate_raftlock_ops_total"), 123463);
  assert.equal(sumOf(s, "missing"), undefined);
});

test("snapshots: grants are ops{op=acquire} + grants_total; raftlock waiters before the gateway's", () => {
  const a = snapshotOf(parseMetrics(scrape(10, 7, 3, 0.5, 100)), 1000);
  assert.equal(a.grants, 17);
  assert.equal(a.waiters, 3);
  assert.equal(a.commitSum, 0.5);
  assert.equal(a.commitCount, 100);
  const b = snapshotOf(parseMetrics(scrape(30, 27, 4, 0.9, 300)), 3000);
  const p = pointBetween(a, b);
  assert.equal(p.grantsPerSec, 20); // 40 more in 2 s
  assert.equal(p.waiters, 4);
  assert.ok(Math.abs(p.commitMs! - 2) < 1e-9); // 0.4 s over 200 commits
  // The first scrape has no rate yet.
  assert.deepEqual(pointBetween(undefined, a), { grantsPerSec: null, waiters: 3, commitMs: null });
  // Without lockgate_raftlock_waiters, lockgate_waiters.
  assert.equal(snapshotOf(parseMetrics("lockgate_waiters 5\n"), 0).waiters, 5);
  assert.equal(snapshotOf(parseMetrics("lockgate_waiters 5\n"), 0).grants, undefined);
});

test("rates: reset, missing, no time", () => {
  assert.equal(rate(10, 5, 1), null);
  assert.equal(rate(undefined, 5, 1), null);
  assert.equal(rate(1, 5, 0), null);
  assert.equal(rate(1, 5, 2), 2);
  assert.equal(meanLatencyMs(1, 10, 1, 10), null); // nothing committed
  assert.equal(meanLatencyMs(1, 10, 0.5, 5), null); // restarted
  assert.equal(meanLatencyMs(0, 0, 0.01, 2), 5);
});

test("Series keeps the last points", () => {
  const s = new Series(3);
  for (const v of [1, 2, 3, 4]) s.push(v);
  assert.deepEqual(s.points, [2, 3, 4]);
  assert.equal(s.last, 4);
  s.push(null);
  assert.equal(s.last, null);
});

test("text formats", () => {
  assert.equal(ttlText(18_400), "18.4 s");
  assert.equal(ttlText(18_499), "18.4 s");
  assert.equal(ttlText(50), "0.1 s");
  assert.equal(ttlText(0), "expired");
  assert.equal(ttlText(-5), "expired");
  assert.equal(durationText(12), "12 ms");
  assert.equal(durationText(5120), "5.1 s");
  assert.equal(durationText(125_000), "2m 05s");
  assert.equal(durationText(7_380_000), "2h 03m");
  assert.equal(numberText(null), "—");
  assert.equal(numberText(3.14159, "ms"), "3.14 ms");
  assert.equal(numberText(12), "12");
  assert.equal(modeText("exclusive", 3), "semaphore/3");
  assert.equal(modeText("shared", 0), "shared");
});

test("sparkPath: right-aligned, gaps for null, flat line for zeros", () => {
  assert.equal(sparkPath([], 60), "");
  const d = sparkPath([0, 1, null, 2], 4, 100, 20);
  const moves = d.match(/[ML]/g)!.join("");
  assert.equal(moves, "MLM"); // the gap starts a new segment
  assert.ok(d.startsWith("M2.0 18.0")); // 0 at the bottom (pad 2)
  assert.ok(d.endsWith("M98.0 2.0")); // the largest at the top, the newest at the right edge
  assert.equal(sparkPath([0, 0], 60, 100, 20).match(/M|L/g)!.length, 2);
});
