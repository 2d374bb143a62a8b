// Package bench is lockgate's bench, `lockgate-bench` (cmd/lockgate-bench):
// it measures every backend, ours and the peer libraries users would
// otherwise pick, side by side. Each job is a package of its own, and they
// depend downward:
//
//   - proxy, provision: the servers of a run (behind cuttable proxies for
//     faults) and the lockers it opens; report: what every report shares;
//     faults: every fault, by one name each.
//   - latency, campaign (fault campaigns, `chaos`), election, scale,
//     tenants, upgrade: one bench each.
//   - matrix: latency and campaigns of every backend in one report.
//
// The history checkers are package check (and check/linearize), which the
// conformance suite uses too.
package bench
