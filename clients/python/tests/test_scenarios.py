"""Runs every scenario of the directory $LOCKGATE_SCENARIOS against
$LOCKGATE_ENDPOINTS by interpreting its steps (scenarios.py; the clients/
harness sets them, with $LOCKGATE_CONTROL); skipped without them.
$LOCKGATE_ONLY=a,b runs only those scenarios."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import traceback
import unittest
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import scenarios  # noqa: E402

SCENARIO_TIMEOUT = 90.0


@unittest.skipUnless(os.environ.get("LOCKGATE_ENDPOINTS"),
                     "LOCKGATE_ENDPOINTS is not set: the scenarios need a cluster (go test ./clients -run TestClients sets it)")
class TestScenarios(unittest.TestCase):
    def test_scenarios(self) -> None:
        endpoints = [e.strip() for e in os.environ["LOCKGATE_ENDPOINTS"].split(",") if e.strip()]
        control = os.environ.get("LOCKGATE_CONTROL")
        only = {n for n in os.environ.get("LOCKGATE_ONLY", "").split(",") if n}
        run_id = uuid.uuid4().hex[:8]
        failed = []
        for sc in scenarios.load():
            name = sc.get("name", "?")
            if only and name not in only:
                continue
            t0 = time.monotonic()
            err = asyncio.run(self._one(endpoints, control, sc, run_id))
            took = (time.monotonic() - t0) * 1000
            if err is None:
                print(f"ok {name} {took:.0f}ms", flush=True)
            else:
                print(f"FAIL {name}: {err}", flush=True)
                failed.append(name)
        self.assertEqual(failed, [], f"scenarios failed: {failed}")

    @staticmethod
    async def _one(endpoints, control, sc, run_id):  # type: ignore[no-untyped-def]
        run = scenarios.Run(endpoints, control, sc, run_id)
        try:
            await asyncio.wait_for(scenarios.run_scenario(run), SCENARIO_TIMEOUT)
            return None
        except asyncio.TimeoutError:
            return f"did not finish within {SCENARIO_TIMEOUT:g} s"
        except Exception as e:
            if os.environ.get("LOCKGATE_DEBUG"):
                traceback.print_exc()
            return f"{type(e).__name__}: {e}"
        finally:
            await run.close()


if __name__ == "__main__":
    unittest.main()
