/**
 * What the sparklines plot, from `GET /v1/console/metrics`
 * (docs/console.md "Metrics"): the cluster's figures — the leader's, which
 * the node serving the page fetches — labelled with the node they come
 * from, and the serving node's own gateway figures, labelled as local.
 * The node takes the rates; the page keeps the last points. No DOM here,
 * so it is unit-tested under Node (console/web/test/unit.test.ts).
 */
import type { Figures, MetricsView } from "./api.js";
import { numberText } from "./format.js";

/** The three sparkline points of one reading (null: no value then). */
export interface Point {
  grantsPerSec: number | null;
  waiters: number | null;
  commitMs: number | null;
}

/** pointOf is the cluster's point: the leader's figures, or no values when there are none. */
export function pointOf(v: MetricsView): Point {
  const c = v.cluster;
  return {
    grantsPerSec: c?.grantsPerSec ?? null,
    waiters: c?.waiters ?? null,
    commitMs: c?.commitMs ?? null,
  };
}

/**
 * sourceText says where the figures come from: "from node 2 (leader)",
 * or why there are none (ok false).
 */
export function sourceText(v: MetricsView): { text: string; ok: boolean } {
  if (v.cluster) {
    const here = v.cluster.node === v.node ? ", this node" : "";
    return { text: `from node ${v.cluster.node} (${v.cluster.state}${here})`, ok: true };
  }
  return { text: `No figures: ${v.clusterError || "no leader known"}`, ok: false };
}

/** localText is the serving node's own gateway figures, labelled as local. */
export function localText(f: Figures): string {
  return `Local, node ${f.node} (${f.state}): ${numberText(f.gatewayGrantsPerSec ?? null, "grants/s")} through its gateway, ${numberText(f.gatewayWaiters ?? null)} waiting there`;
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
