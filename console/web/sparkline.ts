/**
 * Sparklines as inline SVG built through the DOM (no inline styles: the
 * page's CSP allows none; colours come from style.css classes).
 */

const svgNS = "http://www.w3.org/2000/svg";

export const Width = 180;
export const Height = 36;
const pad = 2;

/**
 * sparkPath is the SVG path of points drawn left to right across width ×
 * height, the y axis from 0 to the largest point (or 1); a null point
 * leaves a gap. "" when there is nothing to draw.
 */
export function sparkPath(points: readonly (number | null)[], max: number, width = Width, height = Height): string {
  const n = points.length;
  if (n === 0) return "";
  let top = 0;
  for (const p of points) if (p !== null && Number.isFinite(p) && p > top) top = p;
  if (top === 0) top = 1;
  const step = max > 1 ? (width - 2 * pad) / (max - 1) : 0;
  // Right-aligned: the newest point is at the right edge.
  const x0 = width - pad - (n - 1) * step;
  let d = "";
  let pen = false;
  for (let i = 0; i < n; i++) {
    const p = points[i];
    if (p === null || p === undefined || !Number.isFinite(p)) {
      pen = false;
      continue;
    }
    const x = x0 + i * step;
    const y = height - pad - (Math.max(0, p) / top) * (height - 2 * pad);
    d += `${pen ? "L" : "M"}${x.toFixed(1)} ${y.toFixed(1)}`;
    pen = true;
  }
  return d;
}

/** renderSparkline draws points into svg (replacing what it showed). */
export function renderSparkline(svg: SVGSVGElement, points: readonly (number | null)[], max: number): void {
  svg.setAttribute("viewBox", `0 0 ${Width} ${Height}`);
  svg.setAttribute("width", String(Width));
  svg.setAttribute("height", String(Height));
  svg.setAttribute("preserveAspectRatio", "none");
  let base = svg.querySelector<SVGLineElement>("line.base");
  if (!base) {
    base = document.createElementNS(svgNS, "line");
    base.setAttribute("class", "base");
    svg.appendChild(base);
  }
  base.setAttribute("x1", "0");
  base.setAttribute("x2", String(Width));
  base.setAttribute("y1", String(Height - pad));
  base.setAttribute("y2", String(Height - pad));
  let path = svg.querySelector<SVGPathElement>("path.line");
  if (!path) {
    path = document.createElementNS(svgNS, "path");
    path.setAttribute("class", "line");
    svg.appendChild(path);
  }
  path.setAttribute("d", sparkPath(points, max));
  svg.dataset.points = String(points.length);
}
