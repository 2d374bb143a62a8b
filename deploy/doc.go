// Package deploy holds the tests of lockgate's deployment files: the
// repository root's Dockerfile and docker-compose.yml (the full comparison
// stack: three raftlock nodes, five Redis, PostgreSQL, three etcd, a gateway
// per external backend and the fenced store), and the Helm chart of a
// raftlock cluster in helm/lockgate. No Docker engine or Kubernetes cluster
// is needed: the compose file is loaded and validated with
// compose-spec/compose-go; the chart is linted and rendered by helm (built
// from the Go module proxy; skipped under -short) and every rendered object
// is decoded strictly into its Kubernetes API type; every lockgate command
// line in these files is parsed by the real CLI. docs/operations.md
// ("Containers", "Kubernetes") documents them.
package deploy
