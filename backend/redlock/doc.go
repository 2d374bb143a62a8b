// Package redlock is lockgate's Redis backend: the Redlock algorithm over N
// independent Redis masters, with fencing tokens, waiting without polling
// and lost-lease notification. N = 1 is plain single-Redis locking (no
// fault tolerance: the one node is the lock).
//
// # Keys
//
// For a lock key K, with the default prefix "lockgate":
//
//	lockgate:lock:{K}       the holder's lease handle, SET NX PX ttl
//	lockgate:fence:{K}      the node's fencing counter (no expiry)
//	lockgate:meta:{K}       hash: owner, token, value; same PX as the lock
//	lockgate:abort:{K}:<id> tombstone of a failed attempt (PX ttl)
//	lockgate:gone:{K}:<handle> tombstone of a released grant (PX its ttl): refuses its round's late requests
//	lockgate:released:{K}   pub/sub channel: the token of each release
//	lockgate:queue:{K}      on the first master: sorted set of the waiting Lockers' wanted channels
//	lockgate:turn:{K}       on the first master: the Locker told last, for a short while
//	lockgate:wanted:<id>    pub/sub channel of one Locker: "<handle> <K>" of its grants a caller waits for
//
// The meta hash also records the holder Locker's wanted channel (notify)
// and whether a waiting caller was refused by the grant (wanted).
//
// Lua scripts (embedded from the *.lua files beside this package):
// acquire, renew (compare-and-pexpire), release (compare-and-delete and
// PUBLISH), sync (raise the fence counter), abort (undo a failed attempt),
// handoff (pass the lock to the next local waiter), turn (leave the first
// master's queue) and inspect.
//
// # Acquire
//
// An attempt runs acquire.lua on every node in parallel, each request
// bounded by Config.NodeTimeout. On a free key the script increments the
// node's fence counter (raised first to any token the caller already saw),
// sets the lock to a fresh 128-bit handle with PX ttl and records the meta
// hash, all atomically. On a key held under the same handle (a re-sent
// acquire with AcquireOptions.Handle) it counts as granted there and
// refreshes the TTL. The attempt succeeds when a quorum of N/2+1 nodes
// granted within the validity window:
//
//	validity = ttl − elapsed − drift,  drift = ttl·DriftFactor + 2 ms
//
// (elapsed is measured on the client's monotonic clock from the moment the
// round started). The lease is built with kit.NewLease with Sent = the
// start of the round and the configured DriftFactor, so its Deadline is
// start + ttl − drift: never later than the earliest expiry on any node
// that granted, as long as the clock-rate assumption holds. A failed
// attempt (no quorum, or quorum reached too late) is undone: abort.lua
// deletes the lock on every node that granted and, on every node that did
// not answer, leaves a tombstone for the attempt so that the request, if it
// is still queued there (a paused or slow node), is refused when it runs.
//
// Renew (renew.lua, compare-and-pexpire) and Release (release.lua,
// compare-and-delete) run on every node and act only where the lock still
// holds the lease's handle and no newer token. Renew succeeds only with a
// quorum; Release reports lock.ErrNotHeld unless a quorum still had the
// handle, and lock.ErrUnavailable (outcome unknown) when too few nodes
// answered to tell. A quorum of nodes that cannot be reached gives an error
// matching lock.ErrUnavailable that says how many nodes answered.
//
// # Fencing tokens
//
// Each node keeps its own counter, and a grant's token is the maximum of
// the counters of the quorum that granted it. Counters diverge (a node
// that missed grants lags), so the maximum over one quorum alone could go
// backwards: grant 1 by {A,B,C} with counters 5, 9, 3 gives 9; grant 2 by
// {A,D,E} with 6, 2, 2 would give 6. To prevent this the client raises the
// counter of every node to the grant's token T: right after the grant, in
// the background (sync.lua, off the caller's path, only on nodes that
// answered with a smaller token or did not answer), and again in every
// renew and release (the scripts take T and raise the counter to at least
// T). Any later quorum intersects the earlier one in at least one node, and
// that node's counter is ≥ T once the propagation landed, so the later
// token is > T. While the lease is held no other grant can intersect, so
// the propagation only has to land before the lease ends.
//
// Tokens can still go backwards (or repeat) when:
//
//   - a node restarts without persistence (or with a persistence that lost
//     the last writes: AOF with fsync everysec loses up to a second, RDB
//     snapshots much more): its counter and its locks are gone. With a
//     minority of such nodes nothing changes (the quorum intersection
//     argument needs only one surviving node, and renewals re-raise the
//     counters). With a quorum of reset nodes a second client can acquire
//     the key while the first still believes it holds it, and its token
//     may be ≤ the first's (TestNodeReset pins this: both get token 1;
//     a renewal, release or late background propagation of the first
//     grant that reaches a reset node after its restart raises its counter
//     again, but nothing guarantees one does).
//     Run Redis with appendonly yes and appendfsync always, or delay a
//     restarted node's return by the maximum TTL (the Redlock paper's
//     advice), to rule it out;
//   - the holder crashes (or is partitioned from the nodes that lag) after
//     the grant and before the background propagation lands on them, and
//     never renews or releases: the lease then expires, and a later quorum
//     made of nodes whose counters were lower can mint a token ≤ T;
//   - a Redis server's clock jumps forward: PX expiry follows the server's
//     clock, so the lock can expire early on that node, which breaks mutual
//     exclusion (not just the tokens) when it happens on a quorum. The
//     client's own deadline is monotonic and unaffected.
//
// A fenced resource that rejects tokens ≤ the highest it has seen stays
// safe in all cases except these.
//
// # Waiting without polling
//
// Acquire first tries; if the key is held, the waiter subscribes to the
// key's release channel (one go-redis PubSub per node per Locker, fanned
// out to the Locker's waiters; on the first master alone while it
// answers), waits until the subscription is confirmed (or NodeTimeout),
// and tries again at once (a release published before the subscription
// took effect is not lost). On a contended key the first master (node 0)
// orders the waiters: a waiter refused there joins its queue of waiting
// Lockers, and a release that frees the key on node 0 tells the first of
// them its turn on its wanted channel and keeps the key for it a moment;
// the Locker told makes one round, which nobody else contends. Other
// attempts of a waiter ask node 0 first and the other nodes only if node 0
// granted, so contenders never split the votes. With nobody queued,
// release.lua publishes the released token on the release channel, and a
// waiter also wakes at the holder's remaining TTL (the PTTL returned by
// the failed attempt, plus up to 3 ms of jitter), or after a second at
// most. A Release returns once a quorum of nodes answered; the Locker's
// next attempt or release on that key waits, node by node, until the
// earlier release has reached that node, so that the two cannot overtake
// each other on different connections. A Release whose outcome is unknown
// (too few nodes answered) goes on in the background until it is known,
// so that a key it did free does not stay held until its TTL while the
// waiters sleep. Attempts that fail without a quorum holder to wait for
// (unreachable nodes) back off by Config.Retry. A node 0 that does not
// answer costs no availability: the attempts go on to the other nodes,
// and after repeated failures fall back for a while to parallel rounds and
// to every node's release messages. The queue makes waiting FIFO-ish
// across Lockers (a Locker that released a contended key queues behind
// the others when it wants it back), but it is not strict (a fresh
// Acquire that finds the key free takes it, and a waiter whose turn
// message is lost retries at its recheck): declare no FIFO capability.
// Cancelling the context never leaves a ghost: an attempt in flight is
// seen through, and a grant that raced the cancellation is released.
//
// Within one Locker, Acquire calls for the same key queue in process, in
// arrival order (a local gate): only the first goes to Redis, so callers of
// one Locker never split a quorum's votes between them. When the holder
// releases while a caller of the same Locker waits, the lock is handed over
// without being freed (handoff.lua, on every node: compare the old handle
// and token, mint the next token, replace the lock; quorum and validity
// rules as for an acquire, Sent = the start of the handoff round), at most
// localgate.MaxHandoffs times in a row before a real release lets other Lockers
// in. A failed handoff falls back to a release and a normal attempt.
// TryAcquire, and Acquire with a caller-chosen Handle, bypass the gate.
//
// # The wanted signal
//
// The Locker implements lock.WantedSignaler: a lease's Wanted closes when a
// caller waits for its key. An Acquire (not TryAcquire) refused by a holder
// publishes the holder's handle and the key, from inside acquire.lua, on
// the holder Locker's own wanted channel (recorded in the grant's meta
// hash), which that Locker subscribes once on each node's PubSub
// connection; it marks its live leases of that grant (one whose reply is
// still on its way is marked when it arrives). A waiter publishes at each refused attempt, so a
// holder granted while it still waits hears it at the waiter's next attempt
// (right after the release that let the holder in). Callers of the same
// Locker, which queue in its local gate and never reach Redis, mark its
// leases of the key in process, and a grant made while one of them waits is
// marked at once. The meta hash's wanted mark carries over a local handoff
// (remote waiters only retry after a real release) and is reported by
// renew.lua, which also makes the renewing Locker the one to notify: a lease
// rebuilt with kit.NewLease is told from its first Renew on (best effort:
// if two Lockers renew copies of one grant, messages go to the last one, and
// the other hears at its next renewal). Costs: no request of its own (the
// PUBLISH rides on the waiter's attempt), two small fields per held key's
// meta hash, one SUBSCRIBE per node per Locker; per held lease one slice
// slot and one AfterEnd callback, removed when it ends, and no goroutine.
// A waiter that gave up leaves the grant wanted (Wanted never reopens), and
// through handoffs the grants after it, until the next real release.
//
// # Inspect
//
// Inspect reads every node and reports the holder on which a quorum agrees:
// owner, value, the largest token among them, and the remaining TTL of the
// quorum (the q-th largest PTTL). lock.ErrNotFound when no quorum holds the
// key. Waiters are not tracked in Redis (LockInfo.Waiters is -1).
//
// # Other caveats
//
//   - A failed idempotent re-send (AcquireOptions.Handle) is undone like
//     any failed attempt, which also deletes the original grant on the
//     nodes it reached; acquire again with the same handle.
//   - Nodes that did not answer a successful acquire or a release (paused,
//     partitioned) may run the queued request later and keep a stale copy
//     of the lock until its TTL: harmless for safety (it is a minority),
//     but those nodes refuse that key to others until then.
//   - A node that runs an acquire after its quorum formed (a slow node)
//     mints a node-local token that can differ from the grant's; until the
//     background propagation replaces it (sync.lua records the grant's
//     token, marked final), Inspect may report that larger token, and
//     renew/release are refused on that node (a minority; the quorum
//     decides).
//   - The fence counters never expire: one small key per lock key ever
//     used, per node.
//
// AutoRenew (and zero AcquireOptions, which mean lock.DefaultTTL with
// AutoRenew) run lock.KeepAlive for the lease until it is released or the
// Locker is closed; Done closes when the lease is lost.
package redlock
