// Package deploy holds the tests of lockgate's deployment files: the
// repository root's Dockerfile and docker-compose.yml (the full comparison
// stack: three raftlock nodes, five Redis, PostgreSQL, three etcd, a gateway
// per external backend and the fenced store). No Docker engine is needed:
// the compose file is loaded and validated with compose-spec/compose-go, and
// every lockgate command line in either file is parsed by the real CLI.
// docs/operations.md ("Containers") documents both files.
package deploy
