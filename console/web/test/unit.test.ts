/**
 * Unit tests of the console's pure modules (the sparklines' figures,
 * text formatting, sparkline paths). Run from the repository root:
 *
 *   make console   # installs clients/js's TypeScript if needed
 *   clients/js/node_modules/.bin/tsc -p console/web/test/tsconfig.json
 *   echo '{"type":"module"}' > clients/js/node_modules/.console-test/package.json
 *   node --test clients/js/node_modules/.console-test/test/
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Figures, MetricsView } from "../api.js";
import { localText, pointOf, Series, sourceText } from "../metrics.js";
import { durationText, modeText, numberText, ttlText } from "../format.js";
import { sparkPath } from "../sparkline.js";

const figures = (node: string, state: string, grants: number | null, waiters: number | null, commit: number | null): Figures => ({
  node,
  state,
  grantsPerSec: grants,
  waiters,
  commitMs: commit,
  gatewayGrantsPerSec: 0,
  gatewayWaiters: 0,
  windowMs: 1000,
});

test("the points are the leader's figures, labelled with its node", () => {
  const leader = figures("2", "leader", 120.5, 3, 1.25);
  const v: MetricsView = { node: "1", leaderId: "2", cluster: leader, local: figures("1", "follower", null, 0, null) };
  assert.deepEqual(pointOf(v), { grantsPerSec: 120.5, waiters: 3, commitMs: 1.25 });
  assert.deepEqual(sourceText(v), { text: "from node 2 (leader)", ok: true });
  assert.deepEqual(sourceText({ ...v, node: "2" }), { text: "from node 2 (leader, this node)", ok: true });
  assert.equal(localText(v.local), "Local, node 1 (follower): 0 grants/s through its gateway, 0 waiting there");
});

test("no leader: no values, and the reason instead of zeros", () => {
  const v: MetricsView = { node: "1", leaderId: "", cluster: null, clusterError: "no leader known", local: figures("1", "candidate", 0, 0, null) };
  assert.deepEqual(pointOf(v), { grantsPerSec: null, waiters: null, commitMs: null });
  assert.deepEqual(sourceText(v), { text: "No figures: no leader known", ok: false });
  assert.equal(sourceText({ ...v, clusterError: undefined }).ok, false);
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
