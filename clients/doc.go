// Package clients is the conformance harness of lockgate's client SDKs:
// the Go SDK (client/), the TypeScript client (clients/js) and
// the Python asyncio client (clients/python) all run one scenario set,
// clients/scenarios/scenarios.json, against a real three-node `lockgate
// node` cluster.
//
// TestClients (clients_test.go) builds the lockgate binary, starts the
// cluster on free loopback ports, serves the control API that lets a
// runner kill the leader and restore the cluster (GET /endpoints, POST
// /kill-leader, POST /restore) and read the lock operations the nodes
// committed (GET /ops: session keep-alives vs lease renewals), and runs
// each runner as a subtest: the Go
// scenarios in-process (scenarios_go_test.go), `npm test` in clients/js
// and `python3 -m unittest` in clients/python with the environment
// LOCKGATE_ENDPOINTS, LOCKGATE_CONTROL and LOCKGATE_SCENARIOS. A runner
// implements every scenario by name and fails on a name it does not know,
// so a scenario added to the JSON file forces every client to implement
// it. The protocol the clients code against is docs/protocol.md.
//
// The package has no non-test code; this file only documents it.
package clients
