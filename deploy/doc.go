// Package deploy holds the tests of lockgate's deployment files: the
// repository root's Dockerfile and docker-compose.yml (the full comparison
// stack: three raftlock nodes, five Redis, PostgreSQL, three etcd, a gateway
// per external backend and the fenced store), the Helm chart of a raftlock
// cluster (helm/lockgate), the Prometheus alerting rules (prometheus/), the
// Grafana dashboard (grafana/) and the systemd unit (systemd/). No Docker
// engine, Kubernetes cluster or systemd is needed: the compose file is
// loaded and validated with compose-spec/compose-go; the chart is linted
// and rendered by helm (built from the Go module proxy; skipped under
// -short) and every rendered object is decoded strictly into its
// Kubernetes API type; every lockgate command line in these files is
// parsed by the real CLI. The rules are checked and unit-tested by
// promtool; every metric the rules and the dashboard query is looked up on
// the /metrics of a real raftlock cluster; the unit is checked by
// systemd-analyze verify. docs/operations.md ("Containers", "Kubernetes",
// "Monitoring", "systemd") documents the files.
package deploy
