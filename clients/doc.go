// Package clients is the conformance harness of lockgate's client SDKs:
// the Go SDK (client/), the TypeScript client (clients/js) and the Python
// asyncio client (clients/python) all run one scenario set,
// clients/scenarios, against a real three-node `lockgate node` cluster.
//
// A scenario is data: one NAME.json of steps in a small vocabulary (open a
// client, acquire, expect a grant or an error code of the protocol's
// table, compare tokens, release, watch and expect an event, kill the
// leader, …; clients/scenarios/README.md). Each language's runner is an
// interpreter of those steps — the Go runner in scenarios_go_test.go and
// scenarios_steps_go_test.go, the TypeScript runner in
// clients/js/test/scenarios.ts, the Python runner in
// clients/python/tests/scenarios.py — so a new scenario is written once,
// and a step kind one runner does not know fails the scenario there.
//
// TestClients (clients_test.go) builds the lockgate binary, starts the
// cluster on free loopback ports, serves the control API that lets a
// runner kill the leader and restore the cluster (GET /endpoints, POST
// /kill-leader, POST /restore) and read the lock operations the nodes
// committed (GET /ops: session keep-alives vs lease renewals), and runs
// each runner as a subtest: the Go runner in-process, `npm test` in
// clients/js and `python3 -m unittest` in clients/python with the
// environment LOCKGATE_ENDPOINTS, LOCKGATE_CONTROL and LOCKGATE_SCENARIOS
// (the directory; LOCKGATE_ONLY=a,b runs only those). Each runner prints
// "ok NAME 123ms" per scenario passed, which the harness requires of
// every scenario. Last, it writes a scenario that holds and one whose
// expectation is wrong into a copy of the directory and checks that every
// runner passes the first and fails the second. The protocol the clients
// code against is docs/protocol.md.
//
// The package has no non-test code; this file only documents it.
package clients
