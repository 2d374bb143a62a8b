package check

import "time"

const ms = time.Millisecond

// acq is an OK acquire of key by client c over [start, end] ms with token
// tok, TTL ttl ms and the client's deadline at ddl ms.
func acq(c int, key string, start, end float64, tok uint64, ttl, ddl float64) Op {
	return Op{Client: c, Key: key, Kind: Acquire, Start: d(start), End: d(end), OK: true, Token: tok, TTL: d(ttl), Deadline: d(ddl)}
}

// acqUnknown is an acquire whose outcome is unknown.
func acqUnknown(c int, key string, start, end float64, ttl float64) Op {
	return Op{Client: c, Key: key, Kind: Acquire, Start: d(start), End: d(end), Unknown: true, TTL: d(ttl)}
}

// acqFail is an acquire that was not granted.
func acqFail(c int, key string, start, end float64, ttl float64) Op {
	return Op{Client: c, Key: key, Kind: Acquire, Start: d(start), End: d(end), TTL: d(ttl)}
}

// rel is a confirmed release.
func rel(c int, key string, start, end float64, tok uint64) Op {
	return Op{Client: c, Key: key, Kind: Release, Start: d(start), End: d(end), OK: true, Token: tok}
}

// relNotHeld is a release answered "not held".
func relNotHeld(c int, key string, start, end float64, tok uint64) Op {
	return Op{Client: c, Key: key, Kind: Release, Start: d(start), End: d(end), Token: tok}
}

// relUnknown is a release whose outcome is unknown.
func relUnknown(c int, key string, start, end float64, tok uint64) Op {
	return Op{Client: c, Key: key, Kind: Release, Start: d(start), End: d(end), Unknown: true, Token: tok}
}

// wr is an applied write (seq > 0) to the fenced or unfenced store.
func wr(c int, key string, start, end float64, tok uint64, fenced bool, seq uint64) Op {
	return Op{Client: c, Key: key, Kind: Write, Start: d(start), End: d(end), OK: true, Token: tok, Fenced: fenced, StoreSeq: seq}
}

// wrRejected is a write the store rejected.
func wrRejected(c int, key string, start, end float64, tok uint64, fenced bool) Op {
	return Op{Client: c, Key: key, Kind: Write, Start: d(start), End: d(end), Token: tok, Fenced: fenced}
}

func d(msec float64) time.Duration { return time.Duration(msec * float64(ms)) }

func h(ops ...Op) History { return History(ops) }

// session marks an acquire's lease as one on a client session.
func session(o Op) Op {
	o.Session = true
	return o
}
