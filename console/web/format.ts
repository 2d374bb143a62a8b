/** Text formatting for the console (pure; unit-tested with metrics.ts). */

/** ttlText is a remaining TTL in seconds with one decimal ("18.4 s"), or "expired" at 0. */
export function ttlText(remainingMs: number): string {
  if (!(remainingMs > 0)) return "expired";
  // Round down so that "0.0 s" is never shown while the lease is alive.
  const tenths = Math.floor(remainingMs / 100);
  if (tenths === 0) return "0.1 s";
  return `${(tenths / 10).toFixed(1)} s`;
}

/** durationText is a duration in ms as "12 ms", "3.2 s", "4m 05s" or "2h 03m". */
export function durationText(ms: number): string {
  if (!Number.isFinite(ms)) return "—";
  if (ms < 0) ms = 0;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.floor(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor(s / 60) % 60).padStart(2, "0")}m`;
}

/** numberText prints a sparkline's current value: integers as they are, others with up to one decimal (two below 10). */
export function numberText(v: number | null, unit = ""): string {
  if (v === null || !Number.isFinite(v)) return "—";
  let s: string;
  if (Number.isInteger(v)) s = String(v);
  else if (Math.abs(v) < 10) s = v.toFixed(2);
  else s = v.toFixed(1);
  return unit ? `${s} ${unit}` : s;
}

/** clockText is the local time of day with milliseconds, for the event stream. */
export function clockText(d: Date): string {
  const p = (n: number, w = 2) => String(n).padStart(w, "0");
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

/** modeText names a lock's mode: "exclusive", "shared", or "semaphore/N". */
export function modeText(mode: string, permits: number): string {
  if (permits > 0) return `semaphore/${permits}`;
  return mode || "exclusive";
}
