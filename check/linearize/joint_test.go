package linearize

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lockgate/lockgate/check"
	. "github.com/lockgate/lockgate/check/internal/checktest"
)

// all is an OK AcquireAll by client c of keys with tokens toks (TTL 1 s),
// one op per key tied by id.
func all(id uint64, c int, start, end float64, keys []string, toks []uint64) []check.Op {
	var ops []check.Op
	for i, k := range keys {
		o := Acq(c, k, start, end, toks[i], 1000, start+900)
		o.Joint = id
		ops = append(ops, o)
	}
	return ops
}

// allUnknown is an AcquireAll whose outcome is unknown.
func allUnknown(id uint64, c int, start, end float64, keys ...string) []check.Op {
	var ops []check.Op
	for _, k := range keys {
		o := AcqUnknown(c, k, start, end, 1000)
		o.Joint = id
		ops = append(ops, o)
	}
	return ops
}

func shared(o check.Op, permits int) check.Op {
	o.Shared, o.Permits = true, permits
	return o
}

func read(c int, key string, start, end float64, holders ...uint64) check.Op {
	return check.Op{Client: c, Key: key, Kind: check.Read, Start: D(start), End: D(end), OK: true, Holders: holders}
}

func hist(parts ...any) check.History {
	var h check.History
	for _, p := range parts {
		switch p := p.(type) {
		case check.Op:
			h = append(h, p)
		case []check.Op:
			h = append(h, p...)
		}
	}
	return h
}

func TestJointLinearizability(t *testing.T) {
	ab := []string{"a", "b"}
	cases := []struct {
		name string
		h    check.History
		want porcupine.CheckResult
	}{
		{"AcquireAll after the holders released", hist(
			Acq(0, "a", 0, 1, 1, 1000, 900), Acq(1, "b", 0, 1, 1, 1000, 900),
			all(1, 2, 2, 20, ab, []uint64{2, 2}),
			Rel(0, "a", 5, 6, 1), Rel(1, "b", 10, 11, 1),
			read(3, "a", 21, 22, 2), read(3, "b", 21, 22, 2),
			Rel(2, "a", 30, 31, 2), Rel(2, "b", 30, 31, 2),
			read(3, "a", 32, 33), read(3, "b", 32, 33),
		), porcupine.Ok},
		{"AcquireAll granted while b has another live exclusive holder", hist(
			Acq(1, "b", 0, 1, 1, 1000, 900),
			all(1, 2, 2, 5, ab, []uint64{1, 2}),
			Rel(1, "b", 10, 11, 1),
		), porcupine.Illegal},
		{"read shows the AcquireAll's token on a while b still has its old holder", hist(
			// Client 1 holds b until 50; the AcquireAll returns b's token 2
			// only at 60, but a read at 10 already shows it holding a: a
			// grant of a alone, then of b (one key at a time).
			Acq(1, "b", 0, 1, 1, 1000, 900),
			all(1, 2, 2, 60, ab, []uint64{1, 2}),
			read(3, "a", 10, 11, 1),
			Rel(1, "b", 50, 51, 1),
		), porcupine.Illegal},
		{"the same, the read after b's release: legal", hist(
			Acq(1, "b", 0, 1, 1, 1000, 900),
			all(1, 2, 2, 60, ab, []uint64{1, 2}),
			Rel(1, "b", 50, 51, 1),
			read(3, "a", 52, 53, 1),
		), porcupine.Ok},
		{"the same with two single-key acquires: the per-key search cannot tell", hist(
			Acq(1, "b", 0, 1, 1, 1000, 900),
			Acq(2, "a", 2, 60, 1, 1000, 900), Acq(2, "b", 2, 60, 2, 1000, 900),
			read(3, "a", 10, 11, 1),
			Rel(1, "b", 50, 51, 1),
		), porcupine.Ok},
		{"AcquireAll over a holder whose lease expired", hist(
			Acq(1, "b", 0, 1, 1, 100, 90),
			all(1, 2, 2, 120, ab, []uint64{1, 2}),
			RelNotHeld(1, "b", 130, 131, 1),
		), porcupine.Ok},
		{"semaphore of 2: two permit holders", hist(
			shared(Acq(0, "s", 0, 1, 1, 1000, 900), 2), shared(Acq(1, "s", 0, 1, 2, 1000, 900), 2),
			read(3, "s", 2, 3, 1, 2),
			Rel(0, "s", 5, 6, 1),
			shared(Acq(2, "s", 4, 8, 3, 1000, 900), 2),
		), porcupine.Ok},
		{"semaphore of 2: a third live permit", hist(
			shared(Acq(0, "s", 0, 1, 1, 1000, 900), 2), shared(Acq(1, "s", 0, 1, 2, 1000, 900), 2),
			shared(Acq(2, "s", 2, 3, 3, 1000, 900), 2),
			Rel(0, "s", 5, 6, 1),
		), porcupine.Illegal},
		{"semaphore: a read shows three permits of two", hist(
			shared(Acq(0, "s", 0, 10, 1, 1000, 900), 2), shared(Acq(1, "s", 0, 10, 2, 1000, 900), 2),
			shared(Acq(2, "s", 0, 10, 3, 1000, 900), 2),
			read(3, "s", 11, 12, 1, 2, 3),
		), porcupine.Illegal},
		{"read lock: shared holders coexist", hist(
			shared(Acq(0, "r", 0, 1, 1, 1000, 900), 0), shared(Acq(1, "r", 2, 3, 2, 1000, 900), 0),
			read(3, "r", 4, 5, 1, 2),
			Rel(0, "r", 6, 7, 1), Rel(1, "r", 6, 7, 2),
			Acq(2, "r", 5, 9, 3, 1000, 900),
		), porcupine.Ok},
		{"exclusive grant beside a live shared holder", hist(
			shared(Acq(0, "r", 0, 1, 1, 1000, 900), 0),
			Acq(1, "r", 2, 3, 2, 1000, 900),
			Rel(0, "r", 6, 7, 1),
		), porcupine.Illegal},
		{"AcquireAll beside a live shared holder of one key", hist(
			shared(Acq(0, "b", 0, 1, 1, 1000, 900), 0),
			all(1, 1, 2, 3, ab, []uint64{1, 2}),
			Rel(0, "b", 6, 7, 1),
		), porcupine.Illegal},
		{"a read shows a holder after its release", hist(
			Acq(0, "a", 0, 1, 1, 1000, 900), Rel(0, "a", 2, 3, 1),
			read(1, "a", 4, 5, 1),
		), porcupine.Illegal},
		{"a read shows the key free under a live holder", hist(
			Acq(0, "a", 0, 1, 1, 1000, 900),
			read(1, "a", 4, 5),
			Rel(0, "a", 6, 7, 1),
		), porcupine.Illegal},
		{"a read shows a token no unknown acquire could carry (left to ReadPhantoms)", hist(
			Acq(0, "a", 0, 1, 1, 1000, 900),
			read(1, "a", 4, 5, 7),
		), porcupine.Ok},
		{"a token an unknown acquire may carry, shown beside a holder it would have had to oust", hist(
			Acq(0, "a", 0, 1, 1, 1000, 900),
			AcqUnknown(2, "a", 2, 3, 1000),
			read(1, "a", 4, 5, 7),
		), porcupine.Illegal},
		{"a read may show a holder past its earliest expiry", hist(
			Acq(0, "a", 0, 1, 1, 100, 90),
			read(1, "a", 200, 201, 1),
			read(1, "a", 300, 301),
		), porcupine.Ok},
		{"an unknown AcquireAll that took effect, revealed by a read", hist(
			allUnknown(1, 0, 0, 5, "a", "b"),
			read(1, "a", 10, 11, 4),
			read(1, "b", 10, 11, 9),
		), porcupine.Ok},
		{"an unknown AcquireAll cannot take one key only", hist(
			allUnknown(1, 0, 0, 5, "a", "b"),
			Acq(2, "b", 6, 7, 1, 1000, 900), // b free at 6: the AcquireAll did not happen yet
			read(1, "a", 10, 11, 4),         // … but it holds a at 10
			Rel(2, "b", 20, 21, 1),
		), porcupine.Illegal},
		{"an unknown AcquireAll that never took effect", hist(
			allUnknown(1, 0, 0, 5, "a", "b"),
			Acq(2, "a", 6, 7, 1, 1000, 900), Acq(3, "b", 6, 7, 1, 1000, 900),
			read(1, "a", 10, 11, 1),
		), porcupine.Ok},
		{"unknown release: may have freed the key or not", hist(
			Acq(0, "a", 0, 1, 1, 1000, 900), RelUnknown(0, "a", 2, 3, 1),
			read(1, "a", 4, 5, 1),
			read(1, "a", 6, 7),
			Acq(2, "a", 8, 9, 2, 1000, 900),
		), porcupine.Ok},
		{"failed acquires and unknown reads change nothing", hist(
			Acq(0, "a", 0, 1, 1, 1000, 900), AcqFail(1, "a", 2, 3, 1000),
			check.Op{Client: 2, Key: "a", Kind: check.Read, Start: D(2), End: D(3), Unknown: true},
			read(2, "a", 4, 5, 1),
		), porcupine.Ok},
		{"tokens go back on a key", hist(
			Acq(0, "a", 0, 1, 5, 1000, 900), Rel(0, "a", 2, 3, 5),
			all(1, 1, 4, 5, ab, []uint64{4, 1}),
		), porcupine.Illegal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := JointLinearizability(c.h, check.Options{LinearizabilityTimeout: 30 * time.Second})
			if v.Result != c.want {
				t.Errorf("got %v (%+v), want %v", v.Result, v, c.want)
			}
		})
	}
}

// TestJointGroups: keys that no AcquireAll ties are searched apart, and a
// violation names its group's keys only.
func TestJointGroups(t *testing.T) {
	h := hist(
		all(1, 0, 0, 1, []string{"a", "b"}, []uint64{1, 1}),
		Acq(1, "c", 0, 1, 1, 1000, 900), Acq(2, "c", 2, 3, 2, 1000, 900), // c: two live holders
	)
	v := JointLinearizability(h, check.Options{})
	if v.Result != porcupine.Illegal || v.Groups != 2 || v.Keys != 3 || len(v.NotOkKeys) != 1 || v.NotOkKeys[0] != "c" {
		t.Errorf("got %+v, want Illegal over 2 groups of 3 keys, c not Ok", v)
	}
	if !HasJoint(h) || HasJoint(h[2:]) {
		t.Error("HasJoint")
	}
}

// TestJointPruningKeepsVerdict: left out or not, unknown acquires that no
// read revealed do not change the verdict.
func TestJointPruningKeepsVerdict(t *testing.T) {
	h := hist(
		allUnknown(1, 0, 0, 5, "a", "b"),
		Acq(1, "a", 6, 7, 1, 1000, 900),
		read(2, "a", 8, 9, 1),
		Rel(1, "a", 10, 11, 1),
	)
	if n := len(JointOperations(h, nil)); n != 3 {
		t.Errorf("%d operations, want 3 (the unknown AcquireAll left out)", n)
	}
	h = append(h, read(2, "b", 12, 13, 3))
	if n := len(JointOperations(h, nil)); n != 5 {
		t.Errorf("%d operations, want 5 (the unknown AcquireAll revealed on b)", n)
	}
	if v := JointLinearizability(h, check.Options{}); v.Result != porcupine.Ok {
		t.Errorf("got %v, want Ok", v.Result)
	}
}

// TestJointTimeout: a search with no time left is Unknown, not Ok.
func TestJointTimeout(t *testing.T) {
	h := hist(Acq(0, "a", 0, 1, 1, 1000, 900))
	v := JointLinearizability(h, check.Options{LinearizabilityTimeout: time.Nanosecond})
	if v.Result != porcupine.Unknown || len(v.NotOkKeys) != 1 {
		t.Errorf("got %+v, want Unknown on a", v)
	}
}

// TestCheckRunsJoint: Check runs the joint search on a history with an
// AcquireAll, and only then.
func TestCheckRunsJoint(t *testing.T) {
	h := hist(
		Acq(1, "b", 0, 1, 1, 1000, 900),
		all(1, 2, 2, 60, []string{"a", "b"}, []uint64{1, 2}),
		read(3, "a", 10, 11, 1),
		Rel(1, "b", 50, 51, 1),
	)
	r := Check(h, nil, check.Options{})
	if r.Joint == nil || r.Joint.Result != porcupine.Illegal || !r.Linearizable {
		t.Errorf("joint %+v, per-key linearizable %v: want the joint search Illegal, the per-key one Ok", r.Joint, r.Linearizable)
	}
	if r := Check(hist(Acq(1, "b", 0, 1, 1, 1000, 900)), nil, check.Options{}); r.Joint != nil {
		t.Errorf("joint %+v without an AcquireAll", r.Joint)
	}
}

// TestCheckSearchesSharedKeys: without an AcquireAll, Check still runs the
// joint search over the keys with shared holds (the per-key mutex search
// leaves them out), and only over them: an exclusive grant beside a live
// reader is Illegal there, and the mutex key beside it is not searched
// again.
func TestCheckSearchesSharedKeys(t *testing.T) {
	h := hist(
		shared(Acq(1, "r", 0, 1, 1, 1000, 900), 0),
		Acq(2, "r", 2, 3, 2, 1000, 900), // the reader's lease runs to 1000 at least
		Acq(3, "m", 0, 1, 1, 1000, 900),
	)
	r := Check(h, nil, check.Options{})
	if r.Joint == nil || r.Joint.Result != porcupine.Illegal || r.Joint.Keys != 1 {
		t.Errorf("joint %+v: want the shared key searched jointly, alone, and found Illegal", r.Joint)
	}
	legal := hist(
		shared(Acq(1, "r", 0, 1, 1, 1000, 900), 0),
		Rel(1, "r", 2, 3, 1),
		Acq(2, "r", 4, 5, 2, 1000, 900),
	)
	if r := Check(legal, nil, check.Options{}); r.Joint == nil || r.Joint.Result != porcupine.Ok {
		t.Errorf("joint %+v: want Ok for an exclusive grant after the reader left", r.Joint)
	}
}

// TestCheckJudgesPhantomReadsOfMulti: a read in a multi-key history that
// shows a token no acquire could have carried is left out of the joint
// search and caught by ReadPhantoms.
func TestCheckJudgesPhantomReadsOfMulti(t *testing.T) {
	h := hist(
		all(1, 0, 0, 1, []string{"a", "b"}, []uint64{1, 2}),
		Rel(0, "a", 2, 3, 1), Rel(0, "b", 2, 3, 2),
		read(1, "a", 4, 5, 7),
	)
	r := Check(h, nil, check.Options{})
	if r.Reads.Unexplained != 1 {
		t.Errorf("reads %+v: want the phantom read unexplained", r.Reads)
	}
}
