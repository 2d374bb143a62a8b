package locktest

import "github.com/lockgate/lockgate/check"

// The history a conformance test records and its checker live in package
// check, which the bench's fault campaigns use too, so that one sweep
// decides what an overlap is. These names keep the tests that use them through locktest
// working.

// Hold is one interval during which a client believed it held a key; see
// check.Hold.
type Hold = check.Hold

// ViolationKind names what a Violation broke; see check.ViolationKind.
type ViolationKind = check.ViolationKind

// The kinds of violation CheckHistory reports.
const (
	Overlap         = check.Overlap
	TokenRegression = check.TokenRegression
	TokenRepeat     = check.TokenRepeat
	InvalidHold     = check.InvalidHold
)

// Violation is one breach of mutual exclusion or fencing; see
// check.Violation.
type Violation = check.Violation

// Recorder collects holds from many goroutines; see check.Recorder.
type Recorder = check.Recorder

// CheckHistory reports every overlap and token regression or repeat in a
// history of holds; see check.CheckHistory.
func CheckHistory(holds []Hold) []Violation { return check.CheckHistory(holds) }
