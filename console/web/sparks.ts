/**
 * The page's sparklines: the cluster's figures (GET /v1/console/metrics,
 * the leader's) as three graphs under a label naming the node they come
 * from, and the serving node's own gateway figures under them, labelled as
 * local. A new source (a new leader) starts the graphs afresh.
 */
import type { MetricsView } from "./api.js";
import { numberText } from "./format.js";
import { Series, localText, pointOf, sourceText } from "./metrics.js";
import { renderSparkline } from "./sparkline.js";

const SparkPoints = 60;

function $<T extends Element = HTMLElement>(sel: string): T {
  const e = document.querySelector<T>(sel);
  if (!e) throw new Error(`console: the page has no ${sel}`);
  return e;
}

/** The node the plotted figures come from. */
let source: string | undefined;

const sparks = {
  grants: { series: new Series(SparkPoints), svg: "#spark-grants", value: "#spark-grants-value", unit: "/s" },
  waiters: { series: new Series(SparkPoints), svg: "#spark-waiters", value: "#spark-waiters-value", unit: "" },
  commit: { series: new Series(SparkPoints), svg: "#spark-commit", value: "#spark-commit-value", unit: "ms" },
};

/** showFigures plots one reading. */
export function showFigures(v: MetricsView): void {
  const src = v.cluster?.node;
  if (src !== undefined && src !== source) {
    for (const s of Object.values(sparks)) s.series.clear();
    source = src;
  }
  const p = pointOf(v);
  sparks.grants.series.push(p.grantsPerSec);
  sparks.waiters.series.push(p.waiters);
  sparks.commit.series.push(p.commitMs);
  render();
  const st = sourceText(v);
  renderSource(st.text, st.ok);
  $("#metrics-local").textContent = localText(v.local);
}

/** showNoFigures plots a gap, and why. */
export function showNoFigures(reason: string): void {
  for (const s of Object.values(sparks)) s.series.push(null);
  render();
  renderSource(`No figures: ${reason}`, false);
}

/** clearFigures empties the graphs and their labels. */
export function clearFigures(): void {
  source = undefined;
  for (const s of Object.values(sparks)) s.series.clear();
  render();
  renderSource("—", true);
  $("#metrics-local").textContent = "";
}

function renderSource(text: string, ok: boolean): void {
  const e = $("#metrics-source");
  e.textContent = text;
  e.className = ok ? "metrics-source muted" : "metrics-source bad";
  e.dataset.node = ok ? (source ?? "") : "";
}

function render(): void {
  for (const s of Object.values(sparks)) {
    renderSparkline($<SVGSVGElement>(s.svg), s.series.points, SparkPoints);
    $(s.value).textContent = numberText(s.series.last, s.unit);
  }
}
