/**
 * Runs every scenario of $LOCKGATE_SCENARIOS (default
 * ../scenarios/scenarios.json) against $LOCKGATE_ENDPOINTS, with the
 * harness's control API at $LOCKGATE_CONTROL (clients/clients_test.go sets
 * all three). Prints "ok NAME 123ms" or "FAIL NAME: reason" per scenario;
 * a scenario this runner does not know fails. Skipped without the env.
 */
import { test } from "node:test";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { scenarios, Run, type Scenario } from "./scenarios.js";
import { newHandle } from "../src/wire.js";

const endpoints = (process.env.LOCKGATE_ENDPOINTS ?? "").split(",").map((s) => s.trim()).filter(Boolean);
const control = process.env.LOCKGATE_CONTROL ?? "";
// dist/test/ → clients/js → clients/scenarios
const file = process.env.LOCKGATE_SCENARIOS || fileURLToPath(new URL("../../../scenarios/scenarios.json", import.meta.url));
const skip = endpoints.length === 0 || !control ? "LOCKGATE_ENDPOINTS and LOCKGATE_CONTROL are not set (the Go harness, go test ./clients -run TestClients, sets them)" : false;

const set = skip ? { scenarios: [] as Scenario[] } : (JSON.parse(readFileSync(file, "utf8")) as { version: number; scenarios: Scenario[] });
// LOCKGATE_JS_ONLY=a,b runs only those scenarios (for debugging one; the harness then reports the rest missing).
const only = (process.env.LOCKGATE_JS_ONLY ?? "").split(",").filter(Boolean);
if (only.length) set.scenarios = set.scenarios.filter((s) => only.includes(s.name));
const repeat = Number(process.env.LOCKGATE_JS_REPEAT ?? 1);
if (repeat > 1) set.scenarios = Array.from({ length: repeat }, () => set.scenarios).flat();
const run = newHandle().slice(0, 8);

test("scenarios", { skip }, async (t) => {
  for (const s of set.scenarios) {
    await t.test(s.name, { timeout: 90_000 }, async () => {
      const f = scenarios[s.name];
      if (!f) {
        console.log(`FAIL ${s.name}: unknown scenario: the TypeScript runner does not implement it`);
        throw new Error(`unknown scenario ${s.name}`);
      }
      const r = new Run({ endpoints, control, run }, s);
      const start = performance.now();
      try {
        await f(r);
      } catch (e) {
        console.log(`FAIL ${s.name}: ${(e as Error).message}`);
        throw e;
      } finally {
        await r.close();
      }
      console.log(`ok ${s.name} ${Math.round(performance.now() - start)}ms`);
    });
  }
});
