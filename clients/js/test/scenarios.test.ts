/**
 * Runs every scenario of the directory $LOCKGATE_SCENARIOS (default
 * ../scenarios) against $LOCKGATE_ENDPOINTS, with the harness's control API
 * at $LOCKGATE_CONTROL (clients/clients_test.go sets all three), by
 * interpreting its steps (./scenarios.ts). Prints "ok NAME 123ms" or
 * "FAIL NAME: reason" per scenario; a step kind this runner does not know
 * fails its scenario. Skipped without the env. $LOCKGATE_ONLY=a,b runs only
 * those scenarios.
 */
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { loadScenarios, runScenario, type Scenario } from "./scenarios.js";
import { newHandle } from "../src/wire.js";

const endpoints = (process.env.LOCKGATE_ENDPOINTS ?? "").split(",").map((s) => s.trim()).filter(Boolean);
const control = process.env.LOCKGATE_CONTROL ?? "";
// dist/test/ → clients/js → clients/scenarios
const dir = process.env.LOCKGATE_SCENARIOS || fileURLToPath(new URL("../../../scenarios", import.meta.url));
const skip = endpoints.length === 0 || !control ? "LOCKGATE_ENDPOINTS and LOCKGATE_CONTROL are not set (the Go harness, go test ./clients -run TestClients, sets them)" : false;

let set: Scenario[] = skip ? [] : loadScenarios(dir);
const only = (process.env.LOCKGATE_ONLY ?? "").split(",").filter(Boolean);
if (only.length) set = set.filter((s) => only.includes(s.name));
const repeat = Number(process.env.LOCKGATE_JS_REPEAT ?? 1);
if (repeat > 1) set = Array.from({ length: repeat }, () => set).flat();
const run = newHandle().slice(0, 8);

test("scenarios", { skip }, async (t) => {
  for (const s of set) {
    await t.test(s.name, { timeout: 90_000 }, async () => {
      const start = performance.now();
      try {
        await runScenario({ endpoints, control, run }, s);
      } catch (e) {
        console.log(`FAIL ${s.name}: ${(e as Error).message}`);
        throw e;
      }
      console.log(`ok ${s.name} ${Math.round(performance.now() - start)}ms`);
    });
  }
});
