/**
 * The browser build: a page in headless Chromium imports dist/src/index.js
 * as an ES module (no bundler, so a Node-only import on the browser path
 * fails it), acquires through the standard WebSocket, inspects and
 * releases, and posts the outcome back. With $LOCKGATE_SECURE_ENDPOINT and
 * $LOCKGATE_TOKEN (the harness's gateway that checks tokens) the page
 * authenticates through the lockgate.bearer subprotocol — a browser cannot
 * set Authorization — and a page without the token must be refused. Needs
 * a gateway ($LOCKGATE_ENDPOINTS) and Chromium ($LOCKGATE_CHROMIUM, or
 * /usr/bin/chromium); skipped without them.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { spawn } from "node:child_process";
import { tmpdir } from "node:os";
import { join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { newHandle } from "../src/wire.js";

const token = process.env.LOCKGATE_TOKEN ?? "";
const secure = process.env.LOCKGATE_SECURE_ENDPOINT ?? "";
const endpoint = token && secure ? secure : (process.env.LOCKGATE_ENDPOINTS ?? "").split(",").filter(Boolean)[0];
const chromium = [process.env.LOCKGATE_CHROMIUM, "/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => p && existsSync(p));
const skip = !endpoint ? "LOCKGATE_ENDPOINTS is not set" : !chromium ? "no Chromium (set LOCKGATE_CHROMIUM)" : false;
// dist/test/ → the package root, which holds dist/src.
const root = fileURLToPath(new URL("../../", import.meta.url));

test("the dist build runs in a browser: acquire, inspect, release over the standard WebSocket", { skip, timeout: 60_000 }, async () => {
  const key = `clients/js/browser/${newHandle().slice(0, 8)}`;
  const page = `<!doctype html><script type="module">
const post = (s) => fetch("/result", { method: "POST", body: s });
try {
  const { Client } = await import("/dist/src/index.js"); // a failed load is reported too
  let refused = "no-token-check";
  if (${JSON.stringify(token)}) {
    const anon = new Client([${JSON.stringify(endpoint)}], { clientId: "js-anon", requestTimeoutMs: 3000 });
    try {
      await anon.tryAcquire(${JSON.stringify(key)} + "/anon", { ttlMs: 10000 });
      refused = "anonymous-page-was-served";
    } catch (e) {
      refused = "refused";
    }
    await anon.close();
  }
  const c = new Client([${JSON.stringify(endpoint)}], { clientId: "js-browser", token: ${JSON.stringify(token)} || undefined });
  const l = await c.acquire(${JSON.stringify(key)}, { ttlMs: 10000 });
  const info = await c.inspect(l.key);
  await l.release();
  const after = await c.inspect(l.key);
  await c.close();
  await post(["ok", typeof l.fencingToken, String(l.fencingToken === info.fencingToken), info.owner, String(after), await l.lost, refused].join(" "));
} catch (e) {
  await post("FAIL " + e.name + ": " + e.message);
}
</script>`;
  let resolveResult!: (s: string) => void;
  const result = new Promise<string>((res) => (resolveResult = res));
  const server = createServer((req, res) => {
    if (req.method === "POST" && req.url === "/result") {
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString()));
      req.on("end", () => {
        res.end();
        resolveResult(body);
      });
      return;
    }
    const path = (req.url ?? "/").split("?")[0]!;
    if (path === "/page.html") {
      res.setHeader("Content-Type", "text/html");
      res.end(page);
      return;
    }
    const file = normalize(join(root, path));
    if (!file.startsWith(join(root, "dist")) || !existsSync(file)) {
      res.statusCode = 404;
      res.end();
      return;
    }
    res.setHeader("Content-Type", file.endsWith(".js") ? "text/javascript" : "application/octet-stream");
    res.end(readFileSync(file));
  });
  await new Promise<void>((res) => server.listen(0, "127.0.0.1", res));
  const port = (server.address() as { port: number }).port;
  const profile = mkdtempSync(join(tmpdir(), "lockgate-chromium-"));
  const browser = spawn(
    chromium as string,
    ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", `--user-data-dir=${profile}`, `http://127.0.0.1:${port}/page.html`],
    { stdio: "ignore", detached: true },
  );
  const exited = new Promise<void>((res) => browser.once("exit", () => res()));
  try {
    const got = await Promise.race([result, exited.then(() => "FAIL chromium exited before the page reported")]);
    assert.equal(got, "ok bigint true js-browser null released " + (token ? "refused" : "no-token-check"));
  } finally {
    try {
      process.kill(-browser.pid!, "SIGKILL"); // the browser and its helper processes, which we started
    } catch {
      // already gone
    }
    await exited;
    server.close();
    rmSync(profile, { recursive: true, force: true });
  }
});
