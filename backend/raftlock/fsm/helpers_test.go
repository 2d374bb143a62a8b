package fsm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
	failAfter         int // fail writes once this many bytes were written (0: never)
}

func (s *memSink) ID() string { return "mem" }
func (s *memSink) Close() error {
	s.closed = true
	return nil
}
func (s *memSink) Cancel() error {
	s.cancelled = true
	return nil
}
func (s *memSink) Write(p []byte) (int, error) {
	if s.failAfter > 0 && s.Len()+len(p) > s.failAfter {
		return 0, errors.New("disk full")
	}
	return s.Buffer.Write(p)
}

// snapBytes persists a snapshot of f and returns its bytes.
func snapBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	var sink memSink
	if err := s.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatalf("sink closed=%v cancelled=%v after a successful Persist", sink.closed, sink.cancelled)
	}
	return sink.Bytes()
}

func restored(t testing.TB, b []byte) *FSM {
	t.Helper()
	f := New()
	if err := f.Restore(readCloser{bytes.NewReader(b)}); err != nil {
		t.Fatal(err)
	}
	return f
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// apply applies e at index and fails the test unless it decodes.
func apply(t testing.TB, f *FSM, index uint64, e Entry) []Result {
	t.Helper()
	out := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: Encode(e)})
	ar, ok := out.(*ApplyResult)
	if !ok {
		t.Fatalf("Apply(index %d) = %v (%T), want *ApplyResult", index, out, out)
	}
	if ar.Index != index || len(ar.Results) != len(e.Ops) {
		t.Fatalf("Apply(index %d): index %d, %d results for %d ops", index, ar.Index, len(ar.Results), len(e.Ops))
	}
	return ar.Results
}

func hexHandle(r *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return hex.EncodeToString(b[:])
}

// randomLog builds n entries of random ops over a few keys. It applies them
// to a scratch FSM as it goes so that about half of the releases, renews and
// expires name the current holder. Entry clocks mostly advance but sometimes
// step back (a new leader whose clock is behind).
func randomLog(t testing.TB, seed uint64, n int) []Entry {
	r := rand.New(rand.NewPCG(seed, 1))
	g := New()
	keys := make([]string, 24)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%02d", i)
	}
	handles := []string{hexHandle(r), hexHandle(r), hexHandle(r), "not-hex-handle", "ABCDEF0123456789ABCDEF0123456789", "h"}
	now := int64(1_700_000_000_000_000_000)
	var log []Entry
	for i := 0; i < n; i++ {
		now += int64(r.IntN(40)) * int64(time.Millisecond)
		if r.IntN(20) == 0 {
			now -= int64(r.IntN(200)) * int64(time.Millisecond)
		}
		e := Entry{Now: now}
		for j := 1 + r.IntN(3); j > 0; j-- {
			key := keys[r.IntN(len(keys))]
			o := Op{Key: key, TTL: time.Duration(r.IntN(500)) * time.Millisecond}
			if r.IntN(30) == 0 {
				o.TTL = -o.TTL
			}
			if l, ok := g.Lock(key); ok && r.IntN(2) == 0 {
				o.Handle, o.Token, o.Owner = l.Handle, l.Token, l.Owner
			} else {
				o.Handle = handles[r.IntN(len(handles))]
				o.Token = uint64(r.IntN(int(g.LastToken()) + 2))
				o.Owner = fmt.Sprintf("owner-%d", r.IntN(5))
			}
			switch x := r.IntN(100); {
			case x < 35:
				o.Type = OpAcquire
				if r.IntN(3) == 0 {
					o.Value = []byte(fmt.Sprintf("v%d", i))
				}
				if r.IntN(10) == 0 {
					o.Handle = hexHandle(r)
				}
			case x < 55:
				o.Type = OpRelease
			case x < 70:
				o.Type = OpRenew
			case x < 85:
				o.Type = OpExpire
			case x < 92:
				o.Type = OpAppendData
				o.Value = []byte(fmt.Sprintf("data-%d", i))
			case x < 94:
				o.Type = OpExtendAll
			case x < 97:
				o.Type = OpSetMember
				o.Key = fmt.Sprintf("node-%d", r.IntN(4))
				o.Value = []byte(fmt.Sprintf("10.0.0.%d:50050", r.IntN(9)))
			default:
				o.Type = OpRemoveMember
				o.Key = fmt.Sprintf("node-%d", r.IntN(4))
			}
			if r.IntN(50) == 0 {
				o.Key = ""
			}
			e.Ops = append(e.Ops, o)
		}
		apply(t, g, uint64(i+1), e)
		log = append(log, e)
	}
	return log
}

// model is an independent, naive implementation of the op semantics, to
// check the FSM against.
type model struct {
	locks   map[string]Lock
	data    map[string][]byte
	members map[string]string
	counter uint64
	now     int64
}

func newModel() *model {
	return &model{locks: map[string]Lock{}, data: map[string][]byte{}, members: map[string]string{}}
}

func (m *model) apply(e Entry) []Result {
	if e.Now > m.now {
		m.now = e.Now
	}
	var out []Result
	for _, o := range e.Ops {
		out = append(out, m.op(o))
	}
	return out
}

func (m *model) op(o Op) Result {
	l, held := m.locks[o.Key]
	live := held && l.Expires > m.now
	holder := Result{}
	if held {
		holder = Result{Token: l.Token, Owner: l.Owner, Expires: l.Expires}
	}
	with := func(s Status, r Result) Result { r.Status = s; return r }
	switch o.Type {
	case OpAcquire:
		switch {
		case o.Key == "" || o.Handle == "" || o.TTL <= 0:
			return Result{Status: StatusInvalid}
		case live && l.Handle == o.Handle:
			return with(StatusOK, holder)
		case live:
			return with(StatusHeld, holder)
		}
		m.counter++
		n := Lock{Key: o.Key, Owner: o.Owner, Handle: o.Handle, Token: m.counter, TTL: o.TTL, Expires: m.now + int64(o.TTL), Value: o.Value}
		m.locks[o.Key] = n
		return Result{Status: StatusOK, Token: n.Token, Owner: n.Owner, Expires: n.Expires, Key: o.Key}
	case OpRelease, OpRenew:
		switch {
		case o.Key == "" || o.Handle == "" || (o.Type == OpRenew && o.TTL <= 0):
			return Result{Status: StatusInvalid}
		case !live || l.Handle != o.Handle || l.Token != o.Token:
			return with(StatusNotHeld, holder)
		case o.Type == OpRelease:
			delete(m.locks, o.Key)
			return Result{Status: StatusOK}
		}
		l.TTL, l.Expires = o.TTL, m.now+int64(o.TTL)
		m.locks[o.Key] = l
		return Result{Status: StatusOK, Token: l.Token, Owner: l.Owner, Expires: l.Expires}
	case OpExpire:
		switch {
		case o.Key == "":
			return Result{Status: StatusInvalid}
		case !held || live || l.Token != o.Token:
			return with(StatusNotHeld, holder)
		}
		delete(m.locks, o.Key)
		return Result{Status: StatusOK}
	case OpExtendAll:
		for k, l := range m.locks {
			if l.Expires > m.now && m.now+int64(l.TTL) > l.Expires {
				l.Expires = m.now + int64(l.TTL)
				m.locks[k] = l
			}
		}
		return Result{Status: StatusOK}
	case OpAppendData:
		if o.Key == "" {
			return Result{Status: StatusInvalid}
		}
		m.data[o.Key] = o.Value
		return Result{Status: StatusOK}
	case OpSetMember:
		if o.Key == "" || len(o.Value) == 0 {
			return Result{Status: StatusInvalid}
		}
		m.members[o.Key] = string(o.Value)
		return Result{Status: StatusOK}
	case OpRemoveMember:
		if _, ok := m.members[o.Key]; !ok {
			return Result{Status: StatusInvalid}
		}
		delete(m.members, o.Key)
		return Result{Status: StatusOK}
	}
	return Result{Status: StatusInvalid}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
