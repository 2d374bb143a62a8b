// Package checktest builds histories by hand for the checkers' tests:
// one call per operation, times in milliseconds.
package checktest

import (
	"time"

	"github.com/lockgate/lockgate/check"
)

// Ms is a millisecond, the unit of the helpers' times.
const Ms = time.Millisecond

// Acq is an OK acquire of key by client c over [start, end] ms with token
// tok, TTL ttl ms and the client's deadline at ddl ms.
func Acq(c int, key string, start, end float64, tok uint64, ttl, ddl float64) check.Op {
	return check.Op{Client: c, Key: key, Kind: check.Acquire, Start: D(start), End: D(end), OK: true, Token: tok, TTL: D(ttl), Deadline: D(ddl)}
}

// AcqUnknown is an acquire whose outcome is unknown.
func AcqUnknown(c int, key string, start, end float64, ttl float64) check.Op {
	return check.Op{Client: c, Key: key, Kind: check.Acquire, Start: D(start), End: D(end), Unknown: true, TTL: D(ttl)}
}

// AcqFail is an acquire that was not granted.
func AcqFail(c int, key string, start, end float64, ttl float64) check.Op {
	return check.Op{Client: c, Key: key, Kind: check.Acquire, Start: D(start), End: D(end), TTL: D(ttl)}
}

// Rel is a confirmed release.
func Rel(c int, key string, start, end float64, tok uint64) check.Op {
	return check.Op{Client: c, Key: key, Kind: check.Release, Start: D(start), End: D(end), OK: true, Token: tok}
}

// RelNotHeld is a release answered "not held".
func RelNotHeld(c int, key string, start, end float64, tok uint64) check.Op {
	return check.Op{Client: c, Key: key, Kind: check.Release, Start: D(start), End: D(end), Token: tok}
}

// RelUnknown is a release whose outcome is unknown.
func RelUnknown(c int, key string, start, end float64, tok uint64) check.Op {
	return check.Op{Client: c, Key: key, Kind: check.Release, Start: D(start), End: D(end), Unknown: true, Token: tok}
}

// Wr is an applied write (seq > 0) to the fenced or unfenced store.
func Wr(c int, key string, start, end float64, tok uint64, fenced bool, seq uint64) check.Op {
	return check.Op{Client: c, Key: key, Kind: check.Write, Start: D(start), End: D(end), OK: true, Token: tok, Fenced: fenced, StoreSeq: seq}
}

// WrRejected is a write the store rejected.
func WrRejected(c int, key string, start, end float64, tok uint64, fenced bool) check.Op {
	return check.Op{Client: c, Key: key, Kind: check.Write, Start: D(start), End: D(end), Token: tok, Fenced: fenced}
}

// D is msec milliseconds.
func D(msec float64) time.Duration { return time.Duration(msec * float64(Ms)) }

// H is a history of ops.
func H(ops ...check.Op) check.History { return check.History(ops) }

// Session marks an acquire's lease as one on a client session.
func Session(o check.Op) check.Op {
	o.Session = true
	return o
}
