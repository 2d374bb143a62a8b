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
    status;
    code;
    constructor(status, code, message) {
        super(message);
        this.name = "ApiError";
        this.status = status;
        this.code = code;
    }
}
export class Api {
    #token;
    /** Called once per 401 answer, before the request's promise rejects. */
    onUnauthorized = () => { };
    get token() {
        return this.#token;
    }
    setToken(token) {
        this.#token = token || undefined;
    }
    /** request sends one request and answers its body (JSON or text); it throws ApiError. */
    async request(method, path, opts = {}) {
        const ctl = new AbortController();
        const timeoutMs = opts.timeoutMs ?? TimeoutMs;
        const timer = window.setTimeout(() => ctl.abort(), timeoutMs);
        const headers = { Accept: opts.text ? "text/plain" : "application/json" };
        if (this.#token !== undefined)
            headers.Authorization = "Bearer " + this.#token;
        let body;
        if (opts.json !== undefined) {
            headers["Content-Type"] = "application/json";
            body = JSON.stringify(opts.json);
        }
        let res;
        try {
            res = await fetch(path, { method, headers, body, signal: ctl.signal, cache: "no-store", credentials: "same-origin" });
        }
        catch (e) {
            window.clearTimeout(timer);
            if (ctl.signal.aborted)
                throw new ApiError(0, "timeout", `${method} ${pathOnly(path)}: no answer within ${timeoutMs / 1000} s`);
            throw new ApiError(0, "network", `${method} ${pathOnly(path)}: ${e.message || "network error"}`);
        }
        let text;
        try {
            text = await res.text();
        }
        catch (e) {
            throw new ApiError(0, ctl.signal.aborted ? "timeout" : "network", `${method} ${pathOnly(path)}: ${ctl.signal.aborted ? `no answer within ${timeoutMs / 1000} s` : e.message}`);
        }
        finally {
            window.clearTimeout(timer);
        }
        if (!res.ok) {
            let code = "http_" + res.status;
            let message = `${method} ${pathOnly(path)}: ${res.status} ${res.statusText}`.trim();
            try {
                const j = JSON.parse(text);
                if (j && j.error) {
                    if (j.error.code)
                        code = j.error.code;
                    if (j.error.message)
                        message = j.error.message;
                }
            }
            catch {
                if (text.trim())
                    message += ": " + text.trim().slice(0, 200);
            }
            if (res.status === 401)
                this.onUnauthorized();
            throw new ApiError(res.status, code, message);
        }
        if (opts.text)
            return text;
        try {
            return JSON.parse(text);
        }
        catch {
            throw new ApiError(res.status, "bad_json", `${method} ${pathOnly(path)}: the answer is not JSON`);
        }
    }
    whoami() {
        return this.request("GET", "/v1/console/whoami");
    }
    cluster() {
        return this.request("GET", "/v1/console/cluster");
    }
    locks(q, after, limit) {
        const p = new URLSearchParams();
        p.set("q", q);
        p.set("after", after);
        p.set("limit", String(limit));
        return this.request("GET", "/v1/console/locks?" + p.toString());
    }
    lock(key) {
        return this.request("GET", "/v1/console/lock?key=" + encodeURIComponent(key));
    }
    forceRelease(key) {
        return this.request("POST", "/v1/console/force-release", { json: { key } });
    }
    metrics() {
        return this.request("GET", "/v1/console/metrics");
    }
}
function pathOnly(path) {
    const i = path.indexOf("?");
    return i < 0 ? path : path.slice(0, i);
}
