package backends

// Caps is what a lock implementation guarantees, for the report's table.
type Caps struct {
	// Fencing: every grant carries a token that strictly increases across
	// the grants of a key, usable against a fenced resource.
	Fencing bool
	// TTL: a holder that stops (crash, pause, cut off) loses the lock after
	// a bounded time, without anyone's help.
	TTL bool
	// Session: the TTL is a client session's, kept alive in the background
	// by the client (etcd's session lease, ZooKeeper's session): a lock
	// ends at the TTL only when the whole client stops (a process pause, a
	// partition), not when one caller stalls.
	Session bool
	// FIFO: waiters are granted in arrival order across clients.
	FIFO bool
	// Inspect: the holder of a key can be named.
	Inspect bool
	// Wanted: a holder is told when another caller waits for its key
	// (lock.Lease.Wanted). None of the peer libraries offers it.
	Wanted bool
}
