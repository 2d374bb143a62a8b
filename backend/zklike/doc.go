// Package zklike is the ZooKeeper lock recipe (zookeeper.apache.org, "Recipes and
// Solutions": Locks) on etcd, using
// go.etcd.io/etcd/client/v3. It is the counterpart of etcd's own
// concurrency.Mutex and of Apache Curator's InterProcessMutex, with the
// fixes their users asked for.
//
//	l, err := zklike.New(zklike.DefaultConfig("http://127.0.0.1:2379"))
//	...
//	defer l.Close()
//
// # The recipe
//
// ZooKeeper's ephemeral node becomes a key under an etcd lease, its
// sequence number the key's create revision. A contender for lock key K
// writes
//
//	<prefix>/<K escaped>/<handle>     value {owner, value, own-lease flag}
//
// under its lease, in one Txn that also reads the two newest contenders:
// the contender with the lowest create revision holds the lock, and every
// other one watches only the key just before its own (no thundering herd).
// When that key is deleted the waiter reads once more (its own key, and
// the newest key older than its own) in one linearizable Txn: if nothing
// older is left it holds the lock, otherwise the deleted key was a waiter
// that gave up and it watches the new predecessor. Waiters are granted in
// create-revision order across all Lockers: FIFO.
//
//   - The handle (the lease id in hex plus 128 random bits) names the key, so
//     a create whose reply was lost is retried with the same name and finds
//     its own key (the ZOOKEEPER-1262 lesson); and two calls that share a
//     session lease never share a key (concurrency.Mutex puts every Mutex
//     of a Session at <pfx>/<lease id>, so two of them on one key both
//     "hold" it).
//   - After a wait the waiter re-reads its own key before it reports a
//     grant, and the grant's deadline counts from the last confirmed
//     keep-alive of its lease: a waiter whose lease ran out while it waited
//     (etcd issue 11456) is not granted on the dead key; it queues again
//     with a fresh one.
//   - The fencing token is the holder's create revision: it strictly
//     increases across grants of a key (etcd revisions are global and
//     durable) and is never issued twice, across etcd restarts too, as long
//     as the cluster's data is not wiped or restored from an older
//     snapshot.
//   - Release is one Txn that deletes the key if its create revision is
//     still the token (else ErrNotHeld, changing nothing); the next waiter's
//     watch fires on that delete. A waiter that is cancelled, or whose
//     Locker closes, deletes its key (revokes its lease) before Acquire
//     returns, so the one behind it moves up at once rather than after a
//     TTL. A grant that raced the cancellation is released the same way.
//   - Inspect reads the oldest contender (owner, value, token), the number
//     of others (Waiters), and its lease's remaining TTL (Expires).
//
// # The wanted signal
//
// The Locker implements lock.WantedSignaler: a holder's Lease.Wanted
// closes when a contender key newer than its own appears in its lock's
// directory, which is how a waiter in any process queues. A watch of
// creations per held directory (the first few; one over the whole prefix
// for the others) serves every lease the Locker holds there, with a
// register of held leases by directory: no goroutine or watch per lease;
// a watch starts with the first lease it serves and stops a minute after
// the last ends. A waiter of the same Locker marks the
// holder before it sends anything; a waiter granted while others still
// wait learns it from the read its grant already makes; a lease rebuilt
// with kit.NewLease is told from its Renew on (it joins the entry of its
// grant, identified by Token and Handle). A TryAcquire of a held
// key creates no key, so it never marks the holder. See wanted.go for
// the cost: etcd sends each such Locker the contender creations of the
// directories it holds (of the whole prefix once it holds many).
//
// # Shared locks, semaphores, multi-key acquire, watch, lock-delay
//
// The Locker offers each of these primitives (Features reports them
// all), each on the same directory of sequence-ordered contenders:
//
//   - Read-write locks (Mode shared) and semaphores (Permits N), as in
//     ZooKeeper's shared-lock recipe and Curator's InterProcessReadWriteLock:
//     a contender's record says its mode and N; a writer holds when nobody
//     is before it, a reader when no writer is before it, a permit when no
//     writer and fewer than N contenders are before it. One order for all
//     modes: a waiting writer is not overtaken by later readers. A shared
//     contender is created by a Txn that fails if its directory changed
//     since the read that found no shared contender with another N
//     (ErrPermitsMismatch otherwise, at once).
//   - AcquireAll puts a contender on every key in one Txn (one create
//     revision everywhere: one total order, so no deadlock), waits until
//     each may hold, and flags them granted in one Txn; until then it
//     holds nothing (Inspect and Watch do not count it) though contenders
//     behind it wait. TryAcquireAll creates them, granted, only if a
//     read of every directory found each free (or shareable, nobody
//     waiting) and none changed since.
//   - Watch reads the directory at revision R and watches it from R+1. A
//     Release deletes its key in a Txn that also puts a release mark
//     (<prefix>/<key> = the token, under a short lease), so a watcher
//     tells a release from an expiry, which etcd performs without one.
//   - LockDelay D puts the key under a lease of its own of TTL + D while
//     the Lease reports TTL: a released key is free at once; one whose
//     holder stopped renewing is deleted by etcd, and granted on, D after
//     the holder's TTL ended. Inspect reports the holder's Expires without
//     the delay; TryAcquire within the delay gets a lock.DelayedError.
//
// See primitives.go and watch.go for the details and their costs: a
// shared acquire reads its directory before it creates its key (one round
// trip more than a mutex), a semaphore waiter watches its whole directory
// (every waiter re-reads on any release before it), and a release carries
// its mark (one more Put in the same Txn, and a lease grant per half
// minute per releasing Locker).
//
// # Leases and TTLs
//
// etcd leases have a TTL in whole seconds and a floor of 1.5 election
// timeouts (2 s with etcd's default 100 ms heartbeat and 1 s election
// timeout); etcd raises a shorter TTL silently. This package rounds a
// requested TTL up to whole seconds and reports the TTL etcd granted on
// the Lease (Lease.TTL), so its Deadline is computed from what etcd
// enforces. Two kinds of lease carry the keys:
//
//   - Auto-renewed locks (AcquireOptions.AutoRenew, and zero options, which
//     mean Config.SessionTTL, default 20 s) share the Locker's session
//     lease of that TTL, as concurrency.Mutex shares a concurrency.Session:
//     it is granted once and renewed every TTL/3 by the Locker, so an
//     acquisition costs one Txn and a release one Txn. Each such lock also
//     runs lock.KeepAlive, whose Renew checks that its own key is still
//     there; losing the session (the Locker paused or cut off past the
//     TTL) ends every Lease under it, through Done.
//   - Locks with an explicit TTL and no auto-renewal get a lease of their
//     own with that TTL (a LeaseGrant round trip more per acquisition), so
//     that a holder that stops renewing loses the lock at its TTL even
//     though its Locker lives on. Release revokes it in the background.
//     While such a contender waits, its Locker keeps the lease alive.
//
// Renew reads the key (ErrNotHeld if it is gone or re-created) and sends
// one keep-alive for its lease. etcd cannot change a lease's TTL: a Renew
// asking for a longer TTL moves the key to a new lease (a Put keeps the
// create revision, so the token stays); one asking for a shorter TTL keeps
// the longer lease and reports it.
//
// # Guarantees and caveats
//
// Mutual exclusion holds as judged by etcd: one key is the oldest at any
// revision. The holder's Deadline is its send time of the last confirmed
// grant or keep-alive plus the TTL minus the drift allowance; etcd's
// leader starts the TTL later (when the request arrives), and a new
// leader extends every lease, so etcd never frees a key before that
// deadline unless the clocks' rates differ by more than the drift factor.
// A holder process that pauses (GC, SIGSTOP, a VM migration) past its
// deadline wakes up believing it holds a lock that etcd has given to the
// next waiter; its Done channel will have closed, but code that does not
// check it between steps can act late. The fencing token is the defence:
// a resource that rejects tokens lower than the highest it has seen
// refuses the late writer (see fencedstore). Expiry is late, never early:
// etcd revokes expired leases from a check every 500 ms through a Raft
// commit, so a crashed holder's key is freed within about TTL + 0.5 s,
// longer across an election.
//
// Requests that fail because etcd is unreachable (no leader, a member
// down, a timeout of Config.RequestTimeout) are retried with Config.Retry
// and then reported as lock.ErrUnavailable with the cause. Watches ask for
// a leader (clientv3.WithRequireLeader), so a waiter connected to a member
// cut off from the cluster re-reads and re-watches elsewhere instead of
// waiting on a dead stream.
//
// # Handoff latency: why concurrency.Mutex takes ~100 ms, and the fix
//
// concurrency.Mutex waits by reading the predecessor (Get with
// WithLastCreate/WithMaxCreateRev) and then watching it from that read's
// header revision. That revision is already in the past when the watch
// reaches the server, and etcd's watchable store (mvcc/watchable_store.go)
// registers a watcher as "synced" only when its start revision is greater
// than the store's current revision or is 0; any other watcher goes to the
// "unsynced" group, which syncWatchersLoop catches up every 100 ms. Until
// that pass, the watcher receives no events, including the delete it waits
// for. Whenever the predecessor is released within 100 ms of the waiter's
// enqueueing, which is every handoff when the queue is short, the waiter
// hears of it only at the next pass: about 50 ms on average, up to 100 ms,
// per handoff.
//
// This package watches the predecessor with no start revision, which etcd
// registers as synced at its current revision, and asks for the watch's
// created notification: its header revision is the revision after which
// the watch reports events. If that is later than the revision at which
// the predecessor was seen alive, the delete may have happened in between,
// so the predecessor is read once more (a count-only Get); otherwise no
// event can have been missed. A handoff then costs the release's commit,
// one watch notification and one linearizable read.
//
// The measurements (handoffs/s against concurrency.Mutex, the sequential
// cycle and where its difference is) are in docs/backends.md ("zklike").
// A grant's key name is never reused (its suffix is the lock token), so
// until etcd compacts, an acquire's range read walks the key's deleted
// names: run etcd with auto-compaction. With an explicit TTL (a lease of
// its own) an acquisition costs one LeaseGrant more.
package zklike
