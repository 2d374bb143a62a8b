package campaign

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lockgate/lockgate/check"
)

// Campaign checker bounds: porcupine gets at most LinearizabilityBudget in
// all and LinearizabilityKeyBudget per key, and the checking process's live
// heap at most LinearizabilityMemoryBudget (a key that runs out of one is
// not checked, see linearize.LinearizabilityByKey), so that a campaign's
// checkers finish within 2 minutes of its end and never take the machine's
// memory.
const (
	LinearizabilityBudget       = 90 * time.Second
	LinearizabilityKeyBudget    = 30 * time.Second
	LinearizabilityMemoryBudget = 4 << 30
)

// CheckBudget bounds the linearizability search of a campaign's history
// (zero fields: the defaults above) and says how much of it may go
// unchecked.
type CheckBudget struct {
	Total, PerKey time.Duration
	Memory        int64 // bytes of live heap
	// TolerateUnchecked is the fraction of the keys that may go unchecked
	// (out of time or memory) with the campaign still passing (default 0:
	// any unchecked key fails it).
	TolerateUnchecked float64
	// Keys, when set, restricts the check to these keys (re-checking the
	// ones a campaign could not).
	Keys []string
}

func (b CheckBudget) options(noTokens bool) check.Options {
	o := check.Options{LinearizabilityTimeout: b.Total, LinearizabilityKeyTimeout: b.PerKey,
		LinearizabilityMemory: b.Memory, NoTokens: noTokens}
	if o.LinearizabilityTimeout == 0 {
		o.LinearizabilityTimeout = LinearizabilityBudget
	}
	if o.LinearizabilityKeyTimeout == 0 {
		o.LinearizabilityKeyTimeout = LinearizabilityKeyBudget
	}
	if o.LinearizabilityMemory == 0 {
		o.LinearizabilityMemory = LinearizabilityMemoryBudget
	}
	return o
}

// Unchecked is the part of a report about the keys whose linearizability
// search was given up.
type Unchecked struct {
	// UncheckedKeys are the keys not checked, each with why (the budget
	// it ran out of); the history file (HistoryFile) holds them, and
	// `lockgate-bench check FILE --key K --key-budget D` checks one again.
	UncheckedKeys []UncheckedKey `json:"unchecked_keys,omitempty"`
	// TolerateUnchecked is the fraction of keys allowed to go unchecked.
	TolerateUnchecked float64 `json:"tolerate_unchecked,omitempty"`
	// HistoryFile is where the history was written before the checkers
	// ran (empty when it was not).
	HistoryFile string `json:"history_file,omitempty"`
}

// UncheckedKey is a key whose search was given up.
type UncheckedKey struct {
	Key    string `json:"key"`
	Ops    int    `json:"ops"`
	Reason string `json:"reason"`
}

func (rep *ChaosReport) setNotChecked() {
	rep.UncheckedKeys = nil
	rep.TolerateUnchecked = rep.budget.TolerateUnchecked
	for _, v := range rep.result.LinearizabilityKeys {
		if v.NotChecked != "" {
			rep.UncheckedKeys = append(rep.UncheckedKeys, UncheckedKey{Key: v.Key, Ops: v.Ops, Reason: v.NotChecked})
		}
	}
}

// linearizabilityFailures is why the lock history fails the campaign: a
// key that is not linearizable, or more keys not checked than tolerated.
func (rep *ChaosReport) linearizabilityFailures() []string {
	var out []string
	if rep.Linearizability == "Illegal" {
		out = append(out, fmt.Sprintf("linearizable: false (keys not Ok: %s)", strings.Join(rep.NotLinearizableKeys, ", ")))
	}
	n := len(rep.UncheckedKeys)
	if n == 0 || float64(n) <= rep.TolerateUnchecked*float64(rep.LinearizabilityKeys) {
		return out
	}
	var why []string
	for _, k := range rep.UncheckedKeys {
		why = append(why, k.Key+" ("+k.Reason+")")
	}
	s := fmt.Sprintf("linearizability: %d of %d keys not checked, %d tolerated: %s", n, rep.LinearizabilityKeys,
		int(math.Floor(rep.TolerateUnchecked*float64(rep.LinearizabilityKeys))), strings.Join(why, "; "))
	if rep.HistoryFile != "" {
		s += fmt.Sprintf("; check one again with lockgate-bench check %s --key %s --key-budget 10m", rep.HistoryFile, rep.UncheckedKeys[0].Key)
	}
	return append(out, s)
}

// beforeCheck, when set (tests), runs after the history was written and
// before the checkers.
var beforeCheck func(rep *ChaosReport)

// saveBeforeCheck writes the history to cfg.History (default history.json
// in dir) before the checkers run, as etcd's robustness tests save their
// reports before checking (etcd#21928: the checker ran out of memory on a
// nightly history, which was lost): a checker that crashes or is killed
// leaves the history on disk.
func (rep *ChaosReport) saveBeforeCheck(cfg ChaosConfig, dir string) error {
	path := cfg.History
	if path == "" {
		path = filepath.Join(dir, "history.json")
	}
	rep.HistoryFile = path
	if err := rep.SaveHistory(path); err != nil {
		return fmt.Errorf("writing the history before checking it: %w", err)
	}
	fmt.Fprintf(cfg.Progress, "the history, before checking: %s\n", path)
	if beforeCheck != nil {
		beforeCheck(rep)
	}
	return nil
}

// onlyKeys returns h restricted to keys (all of it when keys is empty).
func onlyKeys(h check.History, keys []string) check.History {
	if len(keys) == 0 {
		return h
	}
	want := map[string]bool{}
	for _, k := range keys {
		want[k] = true
	}
	var out check.History
	for _, o := range h {
		if want[o.Key] {
			out = append(out, o)
		}
	}
	return out
}

// RecheckWith is Recheck with budget: its bounds, its tolerance, and
// with Keys, only those keys' operations (the other checkers then see
// only them too).
func (r *ChaosReport) RecheckWith(b CheckBudget) *ChaosReport {
	c := *r
	c.budget = b
	if len(b.Keys) > 0 {
		c.history = onlyKeys(r.history, b.Keys)
	}
	return c.Recheck()
}

// keepHistory is whether the history written before checking is kept:
// always when it was asked for, else when the campaign failed.
func keepHistory(asked bool, rep *ChaosReport) bool {
	return asked || len(rep.Failures()) > 0 || !rep.Valid
}

// DropHistory removes the history written before checking unless it is to
// be kept (asked: its path was given): a campaign that passed leaves none
// behind unless told to.
func (rep *ChaosReport) DropHistory(asked bool) {
	if rep.HistoryFile != "" && !keepHistory(asked, rep) {
		os.Remove(rep.HistoryFile)
		rep.HistoryFile = ""
	}
}
