/**
 * The console's HTTP calls: the bearer token (kept here, in memory only,
 * never in a URL, cookie or storage) as `Authorization: Bearer`, a 5 s
 * timeout on every request, the contract's `{"error": {code, message}}`
 * errors, and one hook for a 401 (the page then forgets the token and
 * shows its login form).
 */

export const TimeoutMs = 5_000;

/** ApiError is a refused request (status ≥ 400) or a failed one (status 0: network, timeout). */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
  }
}

/** The contract's types (docs/console.md). */
export interface WhoAmI {
  node: string;
  admin: boolean;
  credential: string;
}

export interface NodeView {
  id: string;
  apiAddr: string;
  raftAddr?: string;
  voter?: boolean;
  state: string;
  term: number;
  commitIndex: number;
  appliedIndex: number;
  lastLogIndex?: number;
  lastContactMs: number;
  lagEntries?: number;
  lagging?: boolean;
  error?: string;
}

export interface ClusterView {
  node: string;
  leaderId: string;
  leaderAddr: string;
  term: number;
  nodes: NodeView[];
}

export interface Holder {
  owner: string;
  token: string;
  expiresInMs: number;
  value: string;
}

export interface LockRow {
  key: string;
  mode: string;
  permits: number;
  waiters: number;
  delayMs: number;
  holders: Holder[];
}

export interface LocksPage {
  total: number;
  matched: number;
  next: string;
  waitersKnown: boolean;
  node: string;
  /** How long the node's table scan took (ms): the page paces its refreshes by it. */
  scanMs?: number;
  locks: LockRow[];
}

export interface Waiter {
  owner: string;
  mode: string;
  permits: number;
  keys: string[];
  waitingMs: number;
}

export interface LockDetail extends LockRow {
  queue: Waiter[];
}

export interface ForceReleased {
  key: string;
  released: number;
}

/** One node's figures (GET /v1/console/metrics; null: no value). */
export interface Figures {
  node: string;
  state: string;
  grantsPerSec: number | null;
  waiters: number | null;
  commitMs: number | null;
  gatewayGrantsPerSec: number | null;
  gatewayWaiters: number | null;
  windowMs: number;
}

/** The sparklines' figures: the leader's (`cluster`, null with `clusterError`) and the answering node's own (`local`). */
export interface MetricsView {
  node: string;
  leaderId: string;
  cluster: Figures | null;
  clusterError?: string;
  local: Figures;
}

export class Api {
  #token: string | undefined;
  /** Called once per 401 answer, before the request's promise rejects. */
  onUnauthorized: () => void = () => {};

  get token(): string | undefined {
    return this.#token;
  }

  setToken(token: string | undefined): void {
    this.#token = token || undefined;
  }

  /** request sends one request and answers its body (JSON or text); it throws ApiError. */
  async request(method: "GET" | "POST", path: string, opts: { json?: unknown; text?: boolean; timeoutMs?: number } = {}): Promise<unknown> {
    const ctl = new AbortController();
    const timeoutMs = opts.timeoutMs ?? TimeoutMs;
    const timer = window.setTimeout(() => ctl.abort(), timeoutMs);
    const headers: Record<string, string> = { Accept: opts.text ? "text/plain" : "application/json" };
    if (this.#token !== undefined) headers.Authorization = "Bearer " + this.#token;
    let body: string | undefined;
    if (opts.json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(opts.json);
    }
    let res: Response;
    try {
      res = await fetch(path, { method, headers, body, signal: ctl.signal, cache: "no-store", credentials: "same-origin" });
    } catch (e) {
      window.clearTimeout(timer);
      if (ctl.signal.aborted) throw new ApiError(0, "timeout", `${method} ${pathOnly(path)}: no answer within ${timeoutMs / 1000} s`);
      throw new ApiError(0, "network", `${method} ${pathOnly(path)}: ${(e as Error).message || "network error"}`);
    }
    let text: string;
    try {
      text = await res.text();
    } catch (e) {
      throw new ApiError(0, ctl.signal.aborted ? "timeout" : "network", `${method} ${pathOnly(path)}: ${ctl.signal.aborted ? `no answer within ${timeoutMs / 1000} s` : (e as Error).message}`);
    } finally {
      window.clearTimeout(timer);
    }
    if (!res.ok) {
      let code = "http_" + res.status;
      let message = `${method} ${pathOnly(path)}: ${res.status} ${res.statusText}`.trim();
      try {
        const j = JSON.parse(text) as { error?: { code?: string; message?: string } };
        if (j && j.error) {
          if (j.error.code) code = j.error.code;
          if (j.error.message) message = j.error.message;
        }
      } catch {
        if (text.trim()) message += ": " + text.trim().slice(0, 200);
      }
      if (res.status === 401) this.onUnauthorized();
      throw new ApiError(res.status, code, message);
    }
    if (opts.text) return text;
    try {
      return JSON.parse(text);
    } catch {
      throw new ApiError(res.status, "bad_json", `${method} ${pathOnly(path)}: the answer is not JSON`);
    }
  }

  whoami(): Promise<WhoAmI> {
    return this.request("GET", "/v1/console/whoami") as Promise<WhoAmI>;
  }

  cluster(): Promise<ClusterView> {
    return this.request("GET", "/v1/console/cluster") as Promise<ClusterView>;
  }

  locks(q: string, after: string, limit: number): Promise<LocksPage> {
    const p = new URLSearchParams();
    p.set("q", q);
    p.set("after", after);
    p.set("limit", String(limit));
    return this.request("GET", "/v1/console/locks?" + p.toString()) as Promise<LocksPage>;
  }

  lock(key: string): Promise<LockDetail> {
    return this.request("GET", "/v1/console/lock?key=" + encodeURIComponent(key)) as Promise<LockDetail>;
  }

  forceRelease(key: string): Promise<ForceReleased> {
    return this.request("POST", "/v1/console/force-release", { json: { key } }) as Promise<ForceReleased>;
  }

  metrics(): Promise<MetricsView> {
    return this.request("GET", "/v1/console/metrics") as Promise<MetricsView>;
  }
}

function pathOnly(path: string): string {
  const i = path.indexOf("?");
  return i < 0 ? path : path.slice(0, i);
}
