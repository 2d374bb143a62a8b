package fsm

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/raft"
)

// Formats and the cluster's format gate.
//
// Entry and snapshot formats share their numbers (1: exclusive locks; 2:
// shared locks, semaphores, multi-key groups, lock-delay; 3: sessions),
// and this binary reads every format up to MaxFormat. A cluster mixes
// binaries during a rolling upgrade, so what the leader may write is a
// replicated decision, the Gate: the leader raises it to the lowest
// MaxFormat among the voters once every voter has told it (etcd's cluster
// version works the same way), and it never goes down by itself. A node
// that meets an entry, a snapshot or a gate above what it reads stops
// applying (Halted) instead of carrying on with a state it could not
// compute.

// MaxFormat is the highest entry and snapshot format this binary reads.
const MaxFormat = entryVersionV3

// ErrUnknownFormat is wrapped by the errors of an entry or snapshot whose
// format this node does not read (a newer binary wrote it), and by the
// error a halted FSM returns. It is not ErrMalformed: every node that
// reads the format agrees on the entry, so skipping it would diverge.
var ErrUnknownFormat = errors.New("fsm: format this node does not read")

// SystemPrefix starts the data keys the service keeps for itself (the
// gate, the cluster's identity); Node.AppendData refuses them.
const SystemPrefix = "lockgate/"

// GateKey is the data key that holds the Gate, written with OpAppendData
// (a format-1 op, so that every binary, even one that predates the gate,
// applies it, and every snapshot format carries it).
const GateKey = SystemPrefix + "format-gate"

// ClusterIDKey is the data key that holds the cluster's identity, set when
// a cluster is restored from a backup (a cluster that never was has none).
const ClusterIDKey = SystemPrefix + "cluster-id"

// Gate is the cluster's replicated format decision.
type Gate struct {
	// Format is the highest entry and snapshot format the leader writes.
	Format uint8 `json:"format"`
	// Offer is the highest format whose features are offered to new
	// requests: Format, except while a downgrade drains the state.
	Offer uint8 `json:"offer"`
	// Ceiling, when set, is an operator's downgrade: the leader raises
	// the gate no higher than it, whatever the voters read.
	Ceiling uint8 `json:"ceiling,omitempty"`
}

// DefaultGate is the gate of a cluster that never wrote one: format 1,
// what every binary reads.
var DefaultGate = Gate{Format: 1, Offer: 1}

// Encode returns the gate's stored form.
func (g Gate) Encode() []byte {
	b, _ := json.Marshal(g)
	return b
}

// ParseGate reads a stored gate.
func ParseGate(b []byte) (Gate, error) {
	var g Gate
	if err := json.Unmarshal(b, &g); err != nil {
		return Gate{}, fmt.Errorf("fsm: format gate %q: %w", b, err)
	}
	if g.Format < 1 || g.Offer < 1 || g.Offer > g.Format {
		return Gate{}, fmt.Errorf("fsm: format gate %q: want 1 <= offer <= format", b)
	}
	return g, nil
}

// Features of a format: what the leader may offer at each.
func (g Gate) String() string {
	s := fmt.Sprintf("format %d, offer %d", g.Format, g.Offer)
	if g.Ceiling != 0 {
		s += fmt.Sprintf(", ceiling %d", g.Ceiling)
	}
	return s
}

// Version returns the entry format o needs: 1, 2 or 3.
func (o *Op) Version() uint8 { return o.version() }

// SetMaxFormat makes f read formats up to max only (1 <= max <=
// MaxFormat): a test's stand-in for an older binary. Call it before the
// first Apply or Restore.
func (f *FSM) SetMaxFormat(m uint8) {
	f.mu.Lock()
	f.maxFormat = min(max(m, 1), MaxFormat)
	f.mu.Unlock()
}

// ReadsFormat returns the highest format f reads.
func (f *FSM) ReadsFormat() uint8 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.readable()
}

func (f *FSM) readable() uint8 {
	if f.maxFormat == 0 {
		return MaxFormat
	}
	return f.maxFormat
}

// SetHaltHandler registers fn, called once (from its own goroutine) when f
// halts: it met an entry, a snapshot or a gate above what it reads.
func (f *FSM) SetHaltHandler(fn func(error)) {
	f.mu.Lock()
	f.onHalt = fn
	f.mu.Unlock()
}

// Halted returns the error that halted f, or nil. A halted FSM applies
// nothing more: every later Apply returns the error and changes nothing.
func (f *FSM) Halted() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.halted
}

// halt records err as the reason f stops; under f.mu.
func (f *FSM) halt(err error) {
	if f.halted != nil {
		return
	}
	f.halted = err
	if fn := f.onHalt; fn != nil {
		go fn(err)
	}
}

// Gate returns the cluster's format gate (DefaultGate when none was
// written).
func (f *FSM) Gate() Gate {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.gate
}

// gateOf reads the gate from a data record's value; an unreadable one is
// DefaultGate (the leader writes only valid gates).
func gateOf(r *record) Gate {
	if r == nil {
		return DefaultGate
	}
	g, err := ParseGate([]byte(r.value()))
	if err != nil {
		return DefaultGate
	}
	return g
}

// checkGate halts f when the gate is above what it reads; under f.mu.
func (f *FSM) checkGate() {
	if f.gate.Format > f.readable() {
		f.halt(fmt.Errorf("%w: the cluster writes format %d (gate at log index %d) and this node reads up to format %d: "+
			"run a binary that reads format %d, or lower the gate first with `lockgate format downgrade --to %d`",
			ErrUnknownFormat, f.gate.Format, f.index, f.readable(), f.gate.Format, f.readable()))
	}
}

// NeedsFormat returns the lowest format that can express f's state: the
// format its snapshot would be written in.
// It reads the state in place, without the copy a snapshot makes: the
// session and shared counts first, the lock table only when neither
// decides.
func (f *FSM) NeedsFormat() uint8 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if len(f.sessions) > 0 {
		return snapVersionV3
	}
	if len(f.groups) > 0 {
		return snapVersionV2
	}
	for _, until := range f.delays {
		if until > f.now {
			return snapVersionV2
		}
	}
	for _, r := range f.kv {
		if r.delay() != 0 {
			return snapVersionV2
		}
	}
	return snapVersion
}

// Drain counts what keeps f's state above a format: open sessions and
// their leases (format 3), shared holders and lock-delays (format 2).
type Drain struct {
	Sessions      int `json:"sessions"`
	SessionLeases int `json:"sessionLeases"`
	Shared        int `json:"shared"`
	Delays        int `json:"delays"`
}

// Draining returns what keeps f's state above format 1 or 2.
func (f *FSM) Draining() Drain {
	f.mu.RLock()
	defer f.mu.RUnlock()
	d := Drain{Sessions: len(f.sessions), Shared: f.nshared}
	for _, s := range f.sessions {
		d.SessionLeases += len(s.leases)
	}
	for k, r := range f.kv {
		if strings.HasPrefix(k, lockPrefix) && r.delay() != 0 {
			d.Delays++
		}
	}
	for _, until := range f.delays {
		if until > f.now {
			d.Delays++
		}
	}
	return d
}

// Digest returns the SHA-256 of f's snapshot: two FSMs with equal state
// (applied index, clock and counter included) have equal digests.
func (f *FSM) Digest() [32]byte {
	s, _ := f.Snapshot()
	h := sha256.New()
	if err := s.(*snapshot).writeTo(h); err != nil {
		panic(err) // a hash never fails to write
	}
	var d [32]byte
	copy(d[:], h.Sum(nil))
	return d
}

// readableEntry returns the halt error when f has halted, or halts f and
// returns it when l's format is one f does not read.
func (f *FSM) readableEntry(l *raft.Log) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.halted == nil && len(l.Data) > 0 && l.Data[0] > f.readable() {
		f.halt(fmt.Errorf("%w: log index %d is an entry of format %d and this node reads up to format %d: "+
			"this binary is older than the one that wrote it; run a binary that reads format %d",
			ErrUnknownFormat, l.Index, l.Data[0], f.readable(), l.Data[0]))
	}
	return f.halted
}
