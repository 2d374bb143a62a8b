import { numberText } from "./format.js";
/** pointOf is the cluster's point: the leader's figures, or no values when there are none. */
export function pointOf(v) {
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
export function sourceText(v) {
    if (v.cluster) {
        const here = v.cluster.node === v.node ? ", this node" : "";
        return { text: `from node ${v.cluster.node} (${v.cluster.state}${here})`, ok: true };
    }
    return { text: `No figures: ${v.clusterError || "no leader known"}`, ok: false };
}
/** localText is the serving node's own gateway figures, labelled as local. */
export function localText(f) {
    return `Local, node ${f.node} (${f.state}): ${numberText(f.gatewayGrantsPerSec ?? null, "grants/s")} through its gateway, ${numberText(f.gatewayWaiters ?? null)} waiting there`;
}
/** Series keeps the last `max` points of one sparkline (null: no value then). */
export class Series {
    max;
    points = [];
    constructor(max = 60) {
        this.max = max;
    }
    push(v) {
        this.points.push(v);
        while (this.points.length > this.max)
            this.points.shift();
    }
    get last() {
        return this.points.length ? this.points[this.points.length - 1] : null;
    }
    clear() {
        this.points.length = 0;
    }
}
