package soak

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// leaderHour is an hour of three nodes' goroutines, a sample every 10 s:
// the clients' 60 connections' goroutines sit on the leader, which changes
// every 7 minutes, and the cluster total grows by leakPerHour.
func leaderHour(leakPerHour float64) []Sample {
	rng := rand.New(rand.NewPCG(1, 2))
	nodes := []string{"1", "2", "3"}
	var out []Sample
	for t := 0.0; t < 3600; t += 10 {
		lead := int(t/420) % 3
		for i, n := range nodes {
			v := 20 + float64(rng.IntN(3))
			if i == lead {
				v += 60 + leakPerHour*t/3600
			}
			out = append(out, Sample{T: t + float64(i)*0.01, Node: n, PID: 100 + i,
				Values: map[string]float64{Goroutines: v, FDs: v}})
		}
	}
	return out
}

func judgeHour(samples []Sample) *Report {
	r := &Report{Nodes: []string{"1", "2", "3"}, Samples: samples, SampleEvery: 10, Bounds: DefaultBounds, Counts: Counts{Acquired: 1}}
	r.judge(Config{Duration: time.Hour, Settle: time.Minute})
	return r
}

// TestConnectionMetricsJudgedOnTheCluster: goroutines and descriptors that
// follow the leadership from node to node are no growth (each node's own
// figure climbs and falls with it), but a leak shows in the cluster's
// total and fails the run.
func TestConnectionMetricsJudgedOnTheCluster(t *testing.T) {
	r := judgeHour(leaderHour(0)) // only goroutines and fds are sampled
	for _, f := range r.Failures {
		if strings.Contains(f, Goroutines) || strings.Contains(f, FDs) {
			t.Errorf("connections moving with the leader failed the soak: %s", f)
		}
	}
	var shownFail, cluster int
	for _, v := range r.Verdicts {
		switch {
		case v.Node == ClusterNode:
			cluster++
		case v.Shown && !v.Pass:
			shownFail++
		}
	}
	if cluster != 2 {
		t.Errorf("%d cluster verdicts, want goroutines and fds", cluster)
	}
	if shownFail == 0 {
		t.Error("no node's own figure would have failed: the case tests nothing")
	}
	leak := judgeHour(leaderHour(30))
	if !strings.Contains(strings.Join(leak.Failures, "; "), "node all goroutines") {
		t.Errorf("a leak of 30 goroutines an hour passed: %v", leak.Failures)
	}
}
