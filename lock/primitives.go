package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Beyond the exclusive lock: shared (read-write) locks, semaphores,
// multi-key acquires, watches of a key's holders, and lock-delay. A backend
// says which of them it offers with Features; a request that needs one it
// does not offer fails with an error matching ErrUnsupported, checked before
// anything is sent. A backend never pretends.

// Mode is how a lease holds its key.
type Mode uint8

const (
	// ModeExclusive: the only holder of the key (the zero value: a mutex).
	ModeExclusive Mode = 0
	// ModeShared: one of any number of shared holders (a read lock), or,
	// with AcquireOptions.Permits > 0, one of at most Permits holders (a
	// semaphore permit). No exclusive holder coexists with shared ones.
	ModeShared Mode = 1
)

// String returns "exclusive" or "shared".
func (m Mode) String() string {
	switch m {
	case ModeExclusive:
		return "exclusive"
	case ModeShared:
		return "shared"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode parses "exclusive" (or "") and "shared".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "exclusive":
		return ModeExclusive, nil
	case "shared":
		return ModeShared, nil
	}
	return 0, invalid("mode", s, `must be "exclusive" or "shared"`, ErrInvalidMode)
}

// Limits of the primitives.
const (
	// MaxPermits is the largest semaphore (AcquireOptions.Permits).
	MaxPermits = 1 << 16
	// MaxMultiKeys is the most keys one AcquireAll may ask for.
	MaxMultiKeys = 64
	// MaxLockDelay is the longest lock-delay (Chubby's and Consul's
	// maximum: a minute).
	MaxLockDelay = time.Minute
)

// More sentinel errors; see errors.go for the others.
var (
	// ErrUnsupported: the backend does not offer the feature the call
	// needs (see Features). Returned wrapped in an *UnsupportedError.
	ErrUnsupported = errors.New("lock: not supported by this backend")

	// ErrInvalidMode: AcquireOptions.Mode is neither ModeExclusive nor
	// ModeShared.
	ErrInvalidMode = errors.New("lock: invalid mode")

	// ErrInvalidPermits: AcquireOptions.Permits is negative or above
	// MaxPermits.
	ErrInvalidPermits = errors.New("lock: invalid permits")

	// ErrInvalidLockDelay: AcquireOptions.LockDelay is negative or above
	// MaxLockDelay.
	ErrInvalidLockDelay = errors.New("lock: invalid lock delay")

	// ErrInvalidKeys: AcquireAll was given no keys, more than MaxMultiKeys,
	// or the same key twice.
	ErrInvalidKeys = errors.New("lock: invalid key set")

	// ErrPermitsMismatch: a semaphore acquire asked for N permits on a key
	// whose current holders hold it with a different N (or hold it as a
	// read lock, N = 0). N is fixed by the first holder while any holder
	// remains.
	ErrPermitsMismatch = errors.New("lock: permits differ from the key's current holders")

	// ErrWatchOverflow: a watcher fell so far behind the key's changes that
	// the backend dropped its watch (the bound is the backend's, documented
	// with it). Watch again: the new watch starts with the current holders.
	ErrWatchOverflow = errors.New("lock: watch fell behind and was dropped")
)

// Features is a set of optional primitives.
type Features uint32

// The features.
const (
	// FeatureShared: AcquireOptions.Mode = ModeShared (read-write locks).
	FeatureShared Features = 1 << iota
	// FeatureSemaphore: AcquireOptions.Permits > 0.
	FeatureSemaphore
	// FeatureMultiKey: the Locker is a MultiLocker.
	FeatureMultiKey
	// FeatureWatch: the Locker is a Watcher (and so leader election's
	// Observe works on it).
	FeatureWatch
	// FeatureLockDelay: AcquireOptions.LockDelay > 0.
	FeatureLockDelay

	// AllFeatures is every feature above.
	AllFeatures = FeatureShared | FeatureSemaphore | FeatureMultiKey | FeatureWatch | FeatureLockDelay
)

var featureNames = []struct {
	f    Features
	name string
}{
	{FeatureShared, "shared"},
	{FeatureSemaphore, "semaphore"},
	{FeatureMultiKey, "multikey"},
	{FeatureWatch, "watch"},
	{FeatureLockDelay, "lockdelay"},
}

// Has reports whether every feature of want is in f.
func (f Features) Has(want Features) bool { return f&want == want }

// Names returns the features' names in a fixed order ("shared",
// "semaphore", "multikey", "watch", "lockdelay").
func (f Features) Names() []string {
	var out []string
	for _, n := range featureNames {
		if f&n.f != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

// String returns the names joined by ",", or "none".
func (f Features) String() string {
	if f == 0 {
		return "none"
	}
	return strings.Join(f.Names(), ",")
}

// ParseFeatures parses names as Names writes them; unknown names are
// ignored (a newer server may offer features this client does not know),
// and reported in unknown.
func ParseFeatures(names []string) (f Features, unknown []string) {
	for _, s := range names {
		s = strings.TrimSpace(s)
		i := slices.IndexFunc(featureNames, func(n struct {
			f    Features
			name string
		}) bool {
			return n.name == s
		})
		if i < 0 {
			if s != "" {
				unknown = append(unknown, s)
			}
			continue
		}
		f |= featureNames[i].f
	}
	return f, unknown
}

// FeatureReporter is implemented by a Locker that offers optional
// primitives.
type FeatureReporter interface {
	Features() Features
}

// FeaturesOf returns the primitives l offers (none when l does not
// implement FeatureReporter).
func FeaturesOf(l Locker) Features {
	if r, ok := l.(FeatureReporter); ok {
		return r.Features()
	}
	return 0
}

// UnsupportedError says which feature a backend lacks. It matches
// ErrUnsupported.
type UnsupportedError struct {
	Backend string   // e.g. "redlock"
	Feature Features // the missing feature(s)
	Reason  string   // why the backend does not offer it (docs/backends.md)
}

func (e *UnsupportedError) Error() string {
	s := fmt.Sprintf("%v: %s does not offer %s", ErrUnsupported, e.Backend, e.Feature)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Unwrap returns ErrUnsupported.
func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }

// MultiLocker is implemented by a Locker that acquires several keys at
// once (FeatureMultiKey).
type MultiLocker interface {
	// AcquireAll blocks until every key is granted to the caller, all at
	// once, or ctx is done; it never holds some keys while waiting for
	// others, and two callers that list the same keys in different orders
	// never deadlock. It returns one lease per key, in the order of keys,
	// each with a fencing token from its key's sequence (tokens are per
	// key: two keys' leases may carry the same number, as zklike's do, whose
	// token is the one revision that queued them all), to be released together
	// (ReleaseAll) or one by one. opts applies to every key (a Handle, if
	// given, is shared by the leases: a lease is (Key, Token, Handle)).
	// When ctx ends first the caller holds none of the keys.
	AcquireAll(ctx context.Context, keys []string, opts AcquireOptions) ([]*Lease, error)

	// TryAcquireAll makes one attempt: every key, or none and an error
	// matching ErrNotAcquired (a *HeldError for the first key found held).
	TryAcquireAll(ctx context.Context, keys []string, opts AcquireOptions) ([]*Lease, error)
}

// AcquireAll acquires every key through l if it is a MultiLocker, else
// fails with an error matching ErrUnsupported.
func AcquireAll(ctx context.Context, l Locker, keys []string, opts AcquireOptions) ([]*Lease, error) {
	m, ok := l.(MultiLocker)
	if !ok || !FeaturesOf(l).Has(FeatureMultiKey) {
		return nil, &UnsupportedError{Backend: fmt.Sprintf("%T", l), Feature: FeatureMultiKey}
	}
	return m.AcquireAll(ctx, keys, opts)
}

// ReleaseAll releases each lease (concurrently: a backend that batches
// commits, as raftlock does, releases them in one). It returns the errors
// joined, each naming its key; a lease that is no longer held gives an error
// matching ErrNotHeld.
func ReleaseAll(ctx context.Context, l Locker, leases []*Lease) error {
	errs := make([]error, len(leases))
	done := make(chan struct{})
	for i, lease := range leases {
		go func() {
			defer func() { done <- struct{}{} }()
			if err := l.Release(ctx, lease); err != nil {
				key := ""
				if lease != nil {
					key = lease.Key
				}
				errs[i] = fmt.Errorf("release %q: %w", key, err)
			}
		}()
	}
	for range leases {
		<-done
	}
	return errors.Join(errs...)
}

// EventType is the kind of a watch Event.
type EventType uint8

// The event types.
const (
	// EventHolder: a holder of the key when the watch began (one event per
	// holder, oldest grant first), before EventSynced.
	EventHolder EventType = iota + 1
	// EventSynced: the holders above are all there were; every later event
	// is a change. Sent exactly once, also when the key was free.
	EventSynced
	// EventGranted: the key was granted (a new token).
	EventGranted
	// EventReleased: a holder released its lease (or an operator forced it
	// free).
	EventReleased
	// EventExpired: a holder's lease ran out.
	EventExpired
	// EventError: the watch ended (Event.Err says why); the channel closes
	// after it. Not sent when the watch's context ends.
	EventError
)

// String returns the type's name: "holder", "synced", "granted",
// "released", "expired", "error".
func (t EventType) String() string {
	switch t {
	case EventHolder:
		return "holder"
	case EventSynced:
		return "synced"
	case EventGranted:
		return "granted"
	case EventReleased:
		return "released"
	case EventExpired:
		return "expired"
	case EventError:
		return "error"
	}
	return fmt.Sprintf("event(%d)", uint8(t))
}

// Event is one change of a key's holders. For EventHolder and
// EventGranted, Owner, Token, Value, Mode and Permits describe the holder;
// for EventReleased and EventExpired, the holder that left (Token always;
// the others where the backend knows them).
type Event struct {
	Type    EventType
	Key     string
	Owner   string
	Token   Token
	Value   []byte
	Mode    Mode
	Permits int // the semaphore's N; 0 for a mutex or read lock
	// Revision orders events: it increases from one event to the next,
	// also between events of one backend change (a release and the grant
	// it hands over); 0 where the backend has none.
	Revision uint64
	// Err is set on EventError only.
	Err error
}

// Watcher is implemented by a Locker that streams a key's holder changes
// (FeatureWatch).
type Watcher interface {
	// Watch streams key's holders: first one EventHolder per current
	// holder, then EventSynced, then each grant, release and expiry in the
	// order the backend applied them, without gaps. The channel is closed
	// when ctx ends, the Locker is closed, or the watch breaks (then after
	// an EventError: connection lost, leader changed, ErrWatchOverflow). A
	// renewal is not an event. Watching a key takes no lock and needs no
	// holder.
	Watch(ctx context.Context, key string) (<-chan Event, error)
}

// Watch watches key through l if it is a Watcher, else fails with an error
// matching ErrUnsupported.
func Watch(ctx context.Context, l Locker, key string) (<-chan Event, error) {
	w, ok := l.(Watcher)
	if !ok || !FeaturesOf(l).Has(FeatureWatch) {
		return nil, &UnsupportedError{Backend: fmt.Sprintf("%T", l), Feature: FeatureWatch}
	}
	return w.Watch(ctx, key)
}

// DelayedError is returned by TryAcquire when the key is free but within
// its lock-delay (a lease acquired with LockDelay expired, and the delay
// has not passed). It matches ErrNotAcquired.
type DelayedError struct {
	Key   string
	Until time.Time // when the key can be granted again, on the caller's clock (an estimate)
}

func (e *DelayedError) Error() string {
	return fmt.Sprintf("%v: key %q is in its lock-delay for another %v", ErrNotAcquired, e.Key, time.Until(e.Until).Round(time.Millisecond))
}

// Unwrap returns ErrNotAcquired.
func (e *DelayedError) Unwrap() error { return ErrNotAcquired }
