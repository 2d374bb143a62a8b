package fsm

import (
	"errors"
	"strings"
	"testing"
)

// TestOpValidateLimits checks every field limit at max-1, max and max+1:
// Validate refuses exactly what Decode refuses (the leader relies on it to
// keep undecodable ops out of shared entries), and says which field, so the
// leader can answer the caller with a specific error.
func TestOpValidateLimits(t *testing.T) {
	fields := []struct {
		field string
		max   int
		op    func(n int) Op
	}{
		{FieldKey, MaxKeyLen, func(n int) Op { return Op{Type: OpRelease, Key: strings.Repeat("k", n)} }},
		{FieldOwner, MaxOwnerLen, func(n int) Op { return Op{Type: OpAcquire, Key: "k", Owner: strings.Repeat("o", n)} }},
		{FieldHandle, MaxHandleLen, func(n int) Op { return Op{Type: OpRenew, Key: "k", Handle: strings.Repeat("h", n), Token: 1} }},
		{FieldValue, MaxValueLen, func(n int) Op { return Op{Type: OpAppendData, Key: "k", Value: make([]byte, n)} }},
	}
	for _, f := range fields {
		for _, n := range []int{f.max - 1, f.max, f.max + 1} {
			o := f.op(n)
			err := o.Validate()
			_, derr := Decode(Encode(Entry{Ops: []Op{o}}))
			if n <= f.max {
				if err != nil || derr != nil {
					t.Errorf("%s of %d bytes (limit %d): Validate %v, Decode %v; want both to accept", f.field, n, f.max, err, derr)
				}
				continue
			}
			var le *LimitError
			if !errors.As(err, &le) || le.Field != f.field || le.Len != n || le.Limit != f.max || le.Op != o.Type || !errors.Is(err, ErrMalformed) {
				t.Errorf("%s of %d bytes (limit %d): Validate = %#v; want a *LimitError naming the field, matching ErrMalformed", f.field, n, f.max, err)
			}
			if derr == nil {
				t.Errorf("%s of %d bytes (limit %d): Decode accepted what Validate refuses", f.field, n, f.max)
			}
		}
	}
	for _, typ := range []OpType{0, maxOpType + 1} {
		var le *LimitError
		if err := (Op{Type: typ}).Validate(); !errors.As(err, &le) || le.Field != FieldType {
			t.Errorf("Validate(type %d) = %v, want a *LimitError for the type", typ, err)
		}
	}
	for _, typ := range []OpType{OpAcquire, maxV1OpType} {
		if err := (Op{Type: typ}).Validate(); err != nil {
			t.Errorf("Validate(type %s) = %v", typ, err)
		}
	}
	for _, k := range []uint64{0, 1, MaxGroup, MaxGroup + 1} {
		err := (Op{Type: OpAcquireAll, Token: k}).Validate()
		var le *LimitError
		if ok := k >= 1 && k <= MaxGroup; ok != (err == nil) || (!ok && (!errors.As(err, &le) || le.Field != FieldGroup)) {
			t.Errorf("Validate(acquire-all of %d) = %v", k, err)
		}
	}
	for _, p := range []uint32{MaxPermits, MaxPermits + 1} {
		err := (Op{Type: OpAcquire, Mode: ModeShared, Permits: p}).Validate()
		var le *LimitError
		if ok := p <= MaxPermits; ok != (err == nil) || (!ok && (!errors.As(err, &le) || le.Field != FieldPermits)) {
			t.Errorf("Validate(permits %d) = %v", p, err)
		}
		if _, derr := Decode(Encode(Entry{Ops: []Op{{Type: OpAcquire, Mode: ModeShared, Permits: p}}})); (derr == nil) != (err == nil) {
			t.Errorf("permits %d: Validate and Decode disagree: %v vs %v", p, err, derr)
		}
	}
	for _, n := range []int{MaxOps - 1, MaxOps, MaxOps + 1} {
		e := Entry{Ops: make([]Op, n)}
		for i := range e.Ops {
			e.Ops[i].Type = OpExpire
		}
		err := e.Validate()
		if (err == nil) != (n <= MaxOps) {
			t.Errorf("Entry of %d ops (limit %d): Validate = %v", n, MaxOps, err)
		}
	}
}
