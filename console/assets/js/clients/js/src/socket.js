/**
 * One WebSocket handshake, over whichever WebSocket the platform has:
 * the `ws` package in Node (it can send an Authorization header and read a
 * refused handshake's status, body and Location, so a follower's 421/307
 * redirects the client), the standard WebSocket elsewhere (browsers, Deno,
 * Node ≥ 22 without `ws`), which shows a refused handshake only as an
 * error: the client then tries another endpoint.
 */
import { LockgateError } from "./errors.js";
import { base64url } from "./wire.js";
export const Subprotocol = "lockgate.v1";
const isNode = typeof process !== "undefined" && typeof process.versions?.node === "string";
let wsModule;
/** loadWs imports `ws` in Node (a variable specifier keeps bundlers from pulling it into browser builds). */
function loadWs() {
    if (!isNode)
        return Promise.resolve(undefined);
    const name = "ws";
    wsModule ??= import(name).then((m) => m.WebSocket ?? m.default, () => undefined);
    return wsModule;
}
/** protocolsFor lists the subprotocols offered: lockgate.v1, plus the bearer token. */
export function protocolsFor(token) {
    return token ? [Subprotocol, "lockgate.bearer." + base64url(token)] : [Subprotocol];
}
/**
 * dial performs one handshake with url: a Sock, or a Redirect, or throws a
 * LockgateError (unauthorized for 401, else unavailable).
 */
export async function dial(url, opts) {
    if (opts.webSocket)
        return dialStandard(opts.webSocket, url, opts);
    const Ws = await loadWs();
    if (Ws) {
        try {
            return await dialWs(Ws, url, opts, true);
        }
        catch (e) {
            // A server older than v1 selects no subprotocol, which ws refuses:
            // the offer is optional, so ask again without it (the token goes in
            // the Authorization header either way).
            if (e instanceof NoSubprotocol)
                return dialWs(Ws, url, opts, false);
            throw e;
        }
    }
    const Std = globalThis.WebSocket;
    if (!Std)
        throw new LockgateError("unavailable", "lockgate: no WebSocket implementation: install the `ws` package");
    return dialStandard(Std, url, opts);
}
class NoSubprotocol extends Error {
}
function dialWs(Ws, url, opts, offer) {
    return new Promise((resolve, reject) => {
        const headers = { "User-Agent": "lockgate-js-client" };
        if (opts.token)
            headers["Authorization"] = "Bearer " + opts.token;
        const ws = new Ws(url, offer ? protocolsFor(opts.token) : [], {
            headers,
            handshakeTimeout: opts.timeoutMs,
            followRedirects: false,
            maxPayload: 64 << 10,
            perMessageDeflate: false,
            ...(opts.tls ?? {}),
        });
        let features = [];
        let settled = false;
        const fail = (e) => {
            if (settled)
                return;
            settled = true;
            reject(e);
        };
        ws.on("upgrade", (res) => {
            features = parseFeatures(res.headers["lockgate-features"]);
        });
        ws.on("unexpected-response", (req, res) => {
            readBody(res).then((body) => {
                req.destroy();
                if (settled)
                    return;
                settled = true;
                const to = redirectOf(res.statusCode ?? 0, headerOf(res.headers["location"]), body);
                if (to)
                    resolve({ redirect: to });
                else if (res.statusCode === 401)
                    reject(new LockgateError("unauthorized", `lockgate: dial ${url}: HTTP 401: the gateway refused the bearer token`));
                else
                    reject(new LockgateError("unavailable", `lockgate: dial ${url}: HTTP ${res.statusCode}`));
            }, (e) => {
                req.destroy();
                fail(new LockgateError("unavailable", `lockgate: dial ${url}: ${e.message}`, { cause: e }));
            });
        });
        ws.on("error", (e) => {
            if (/no subprotocol/i.test(e.message))
                fail(new NoSubprotocol(e.message));
            else
                fail(new LockgateError("unavailable", `lockgate: dial ${url}: ${e.message}`, { cause: e }));
        });
        ws.once("open", () => {
            if (settled)
                return;
            settled = true;
            const sock = {
                features,
                featuresKnown: true,
                protocol: ws.protocol ?? "",
                send(text) {
                    if (ws.readyState !== 1)
                        throw new Error("connection closed");
                    ws.send(text, (err) => {
                        if (err)
                            ws.terminate();
                    });
                },
                close(code, reason) {
                    if (code === undefined)
                        ws.terminate();
                    else
                        ws.close(code, reason);
                },
                ping() {
                    if (ws.readyState === 1)
                        ws.ping();
                    return true;
                },
                onmessage: () => { },
                onactivity: () => { },
                onclose: () => { },
            };
            ws.on("message", (data, isBinary) => {
                sock.onactivity();
                if (!isBinary)
                    sock.onmessage(data.toString());
            });
            ws.on("pong", () => sock.onactivity());
            ws.on("ping", () => sock.onactivity());
            ws.on("close", (code, reason) => sock.onclose(new Error(`connection closed (${code}${reason?.length ? " " + reason.toString() : ""})`)));
            resolve(sock);
        });
    });
}
function headerOf(h) {
    return Array.isArray(h) ? h[0] : h;
}
function readBody(res) {
    return new Promise((resolve, reject) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk) => {
            if (body.length < 64 << 10)
                body += chunk;
        });
        res.on("end", () => resolve(body));
        res.on("error", reject);
    });
}
/** parseFeatures splits a Lockgate-Features header ("wanted, x"). */
export function parseFeatures(h) {
    const v = Array.isArray(h) ? h.join(",") : (h ?? "");
    return v.split(",").map((s) => s.trim()).filter(Boolean);
}
/**
 * redirectOf reads the leader's address from a refused handshake: the
 * Location of a 307/308, or the 421 body's error.leader.addr. "" for none.
 */
export function redirectOf(status, location, body) {
    if (status !== 307 && status !== 308 && status !== 421)
        return "";
    if (location) {
        try {
            const u = new URL(location);
            if (u.host)
                return u.host;
        }
        catch {
            // not a URL: fall through to the body
        }
    }
    try {
        const m = JSON.parse(body);
        const addr = m?.error?.leader?.addr;
        return typeof addr === "string" ? addr : "";
    }
    catch {
        return "";
    }
}
function dialStandard(Std, url, opts) {
    return new Promise((resolve, reject) => {
        // A browser cannot set headers: the token travels as a subprotocol.
        const ws = new Std(url, protocolsFor(opts.token));
        const timer = setTimeout(() => {
            ws.close();
            reject(new LockgateError("unavailable", `lockgate: dial ${url}: no handshake within ${opts.timeoutMs} ms`));
        }, opts.timeoutMs);
        ws.onerror = () => {
            clearTimeout(timer);
            reject(new LockgateError("unavailable", `lockgate: dial ${url}: handshake failed (refused, redirected, or unauthorized: a browser does not say which)`));
        };
        ws.onopen = () => {
            clearTimeout(timer);
            const sock = {
                features: [],
                featuresKnown: false,
                protocol: ws.protocol ?? "",
                send(text) {
                    if (ws.readyState !== 1)
                        throw new Error("connection closed");
                    ws.send(text);
                },
                close(code, reason) {
                    ws.close(code ?? 1000, reason);
                },
                ping: () => false,
                onmessage: () => { },
                onactivity: () => { },
                onclose: () => { },
            };
            ws.onerror = null;
            ws.onmessage = (ev) => {
                sock.onactivity();
                if (typeof ev.data === "string")
                    sock.onmessage(ev.data);
            };
            ws.onclose = (ev) => sock.onclose(new Error(`connection closed (${ev.code}${ev.reason ? " " + ev.reason : ""})`));
            resolve(sock);
        };
    });
}
/**
 * wsUrl turns an endpoint ("host:port", or a ws/wss/http/https URL) into the
 * lock protocol's WebSocket URL; a bare host:port is wss:// when secure.
 */
export function wsUrl(endpoint, secure) {
    const raw = endpoint.includes("://") ? endpoint : (secure ? "wss://" : "ws://") + endpoint;
    let u;
    try {
        u = new URL(raw);
    }
    catch {
        throw new LockgateError("bad_json", `lockgate: endpoint ${JSON.stringify(endpoint)} is not host:port or a URL`);
    }
    const scheme = { "ws:": "ws:", "wss:": "wss:", "http:": "ws:", "https:": "wss:" }[u.protocol];
    if (!scheme)
        throw new LockgateError("bad_json", `lockgate: endpoint ${JSON.stringify(endpoint)}: scheme ${u.protocol} is not ws, wss, http or https`);
    if (!u.host)
        throw new LockgateError("bad_json", `lockgate: endpoint ${JSON.stringify(endpoint)} has no host`);
    const path = u.pathname === "" || u.pathname === "/" ? "/v1/ws" : u.pathname;
    return `${scheme}//${u.host}${path}${u.search}`;
}
