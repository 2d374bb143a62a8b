import { numberText } from "./format.js";
import { Series, localText, pointOf, sourceText } from "./metrics.js";
import { renderSparkline } from "./sparkline.js";
const SparkPoints = 60;
function $(sel) {
    const e = document.querySelector(sel);
    if (!e)
        throw new Error(`console: the page has no ${sel}`);
    return e;
}
/** The node the plotted figures come from. */
let source;
const sparks = {
    grants: { series: new Series(SparkPoints), svg: "#spark-grants", value: "#spark-grants-value", unit: "/s" },
    waiters: { series: new Series(SparkPoints), svg: "#spark-waiters", value: "#spark-waiters-value", unit: "" },
    commit: { series: new Series(SparkPoints), svg: "#spark-commit", value: "#spark-commit-value", unit: "ms" },
};
/** showFigures plots one reading. */
export function showFigures(v) {
    const src = v.cluster?.node;
    if (src !== undefined && src !== source) {
        for (const s of Object.values(sparks))
            s.series.clear();
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
export function showNoFigures(reason) {
    for (const s of Object.values(sparks))
        s.series.push(null);
    render();
    renderSource(`No figures: ${reason}`, false);
}
/** clearFigures empties the graphs and their labels. */
export function clearFigures() {
    source = undefined;
    for (const s of Object.values(sparks))
        s.series.clear();
    render();
    renderSource("—", true);
    $("#metrics-local").textContent = "";
}
function renderSource(text, ok) {
    const e = $("#metrics-source");
    e.textContent = text;
    e.className = ok ? "metrics-source muted" : "metrics-source bad";
    e.dataset.node = ok ? (source ?? "") : "";
}
function render() {
    for (const s of Object.values(sparks)) {
        renderSparkline($(s.svg), s.series.points, SparkPoints);
        $(s.value).textContent = numberText(s.series.last, s.unit);
    }
}
