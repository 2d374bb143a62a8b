package campaign

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/bench/faults"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/internal/backends"
	"github.com/lockgate/lockgate/lock"
)

// Reads: the campaign's clients ask who holds a key (Inspect) now and then
// — the key they are about to acquire, the key they hold, a key at random
// after a release — and record each answer as a check.Read op with the
// tokens it showed, which the lock model checks (check/linearize): a read
// must show the grant that holds the key at some instant of the read, and
// free only once its holder's lease may have expired.
//
// On raftlock the SDK's Inspect goes to the gateway it is connected to,
// which is the leader's after the first redirect, and the leader answers
// only after it has confirmed with a quorum that it still leads
// (verifyLeader): a leader paused by SIGSTOP (the pause fault) keeps its
// clients' connections, their reads wait on it, and when it resumes
// deposed it must not answer from its stale state. ReadsViaPaused counts
// the reads sent through the paused node's gateway.

// readState is the workload's reads.
type readState struct {
	on bool // the campaign's clients read
	// paused is the API address (its proxy's) of the raftlock node that
	// a pause fault has stopped, while it is stopped.
	paused atomic.Pointer[string]
	// viaPaused counts the reads sent to that node's gateway while it
	// was stopped; viaPausedAnswered those of them that were answered.
	viaPaused, viaPausedAnswered atomic.Int64
}

// readsCheckable reports whether the campaign's clients read on backend
// in mode: on a mutex (the model's), with the backend's own fencing
// tokens, on raftlock, whose Inspect is meant to be linearizable (a
// leader's read after a quorum check). The other backends' Inspect is a
// view that the lock model was not shown to fit (redlock's is a quorum of
// node-local answers), so they do not read yet.
func readsCheckable(backend, mode string) bool {
	info := provision.InfoOf(backend)
	return mode == ChaosExclusive && info.Caps.Fencing && info.Caps.Inspect && provision.KindOf(backend) == backends.KindRaft
}

// endpointer is a client that says which gateway it is connected to
// (client.Client.Endpoint).
type endpointer interface{ Endpoint() string }

// inspect asks l who holds key and records the answer.
func (w *Workload) inspect(ctx context.Context, id int, l lock.Locker, key string) {
	if !w.reads.on {
		return
	}
	paused := false
	if e, ok := l.(endpointer); ok {
		if p := w.reads.paused.Load(); p != nil && e.Endpoint() == *p {
			paused = true
			w.reads.viaPaused.Add(1)
		}
	}
	r, err := w.readHolders(ctx, id, l, key, 2*w.cfg.TTL)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return // the campaign ended
	default:
		w.fail("inspect", err)
	}
	if paused && r.OK {
		w.reads.viaPausedAnswered.Add(1)
	}
	w.Record(r)
}

// readHolders asks l who holds key and returns the Read op, not yet
// recorded: OK with the holders' tokens (none: free), or Unknown with the
// error of an Inspect that failed.
func (w *Workload) readHolders(ctx context.Context, id int, l lock.Locker, key string, timeout time.Duration) (check.Op, error) {
	r := check.Op{Client: id, Key: key, Kind: check.Read, Start: w.Now()}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	info, err := l.Inspect(rctx, key)
	cancel()
	r.End = w.Now()
	switch {
	case err == nil:
		r.OK = true
		if len(info.Holders) == 0 {
			r.Holders = []uint64{uint64(info.Token)}
		}
		for _, h := range info.Holders {
			r.Holders = append(r.Holders, uint64(h.Token))
		}
		return r, nil
	case errors.Is(err, lock.ErrNotFound):
		r.OK = true
		return r, nil
	}
	r.Unknown = true
	return r, err
}

// notePause tells the reads which raftlock node a fault stopped (what is
// its description, "SIGSTOP leader 2"), or, with healed, that it runs
// again.
func (w *Workload) notePause(tg *Target, name, what string, healed bool) {
	if name != faults.Pause || tg.s == nil || tg.s.RaftProcs == nil {
		return
	}
	if healed {
		w.reads.paused.Store(nil)
		return
	}
	for i, nd := range tg.s.RaftProcs.Nodes {
		if strings.HasSuffix(what, " "+nd.ID) && i < len(tg.s.RaftAPILinks) && tg.s.RaftAPILinks[i] != nil {
			addr := tg.s.RaftAPILinks[i].Addr()
			w.reads.paused.Store(&addr)
			return
		}
	}
}

// CampaignReads are a report's reads and lease-cache counts.
type CampaignReads struct {
	// Reads counts the answered reads (Inspect); PhantomReads those that
	// showed a token no known grant carried, UnexplainedReads those of
	// them that no acquire of unknown outcome can explain (must be 0:
	// see linearize.ReadPhantoms). The other reads are checked by the
	// linearizability search.
	Reads int `json:"reads"`
	// Readers is how many clients did nothing but read (Readers, beside
	// the campaign's clients), when the campaign read.
	Readers          int `json:"readers,omitempty"`
	PhantomReads     int `json:"phantom_reads,omitempty"`
	UnexplainedReads int `json:"unexplained_reads,omitempty"`
	// ReadsViaPaused counts the reads sent to the gateway of a raftlock
	// node while a pause fault had stopped it (SIGSTOP), and
	// ReadsViaPausedAnswered those of them that got an answer (after the
	// node resumed, from the leader it then confirmed it was).
	ReadsViaPaused         int64 `json:"reads_via_paused,omitempty"`
	ReadsViaPausedAnswered int64 `json:"reads_via_paused_answered,omitempty"`
	// ReadExamples describes a few unexplained reads.
	ReadExamples []string `json:"read_examples,omitempty"`
	// CachedClients is how many clients ran with the SDK's lease cache
	// (ChaosConfig.CacheShare); CacheHits how many of their acquires the
	// cache answered with the lease it kept (no round trip: the same
	// hold goes on), CacheKept how many of their releases it kept.
	CachedClients int   `json:"cached_clients,omitempty"`
	CacheHits     int64 `json:"cache_hits,omitempty"`
	CacheKept     int64 `json:"cache_kept,omitempty"`
}

// readsFrom copies the workload's counts into the report.
func (rep *ChaosReport) readsFrom(w *Workload) {
	rep.ReadsViaPaused, rep.ReadsViaPausedAnswered = w.reads.viaPaused.Load(), w.reads.viaPausedAnswered.Load()
	if w.reads.on {
		rep.Readers = Readers
	}
	rep.CachedClients, rep.CacheHits, rep.CacheKept = w.cache.clients, w.cache.hits.Load(), w.cache.kept.Load()
}

// readsCheck sets the report's read verdicts from its checkers' result.
func (rep *ChaosReport) readsCheck() {
	r := rep.result.Reads
	rep.Reads, rep.PhantomReads, rep.UnexplainedReads, rep.ReadExamples = r.Reads, r.Phantoms, r.Unexplained, r.Examples
}

// readsText is the reads' line of the table ("" when nothing was read).
func (rep *ChaosReport) readsText() string {
	s := ""
	if rep.Reads > 0 || rep.PhantomReads > 0 {
		s = fmt.Sprintf("%d answered (%d clients only read), checked with the lock history; %d phantom (%d unexplained); %d sent to a paused node (%d answered)",
			rep.Reads, rep.Readers, rep.PhantomReads, rep.UnexplainedReads, rep.ReadsViaPaused, rep.ReadsViaPausedAnswered)
	}
	if rep.CachedClients > 0 {
		if s != "" {
			s += "; "
		}
		s += fmt.Sprintf("%d clients with the lease cache: %d acquires served from it, %d releases kept", rep.CachedClients, rep.CacheHits, rep.CacheKept)
	}
	return s
}

// readFailures is the reads' entry of Failures: reads that showed a token
// no acquire could have carried.
func (rep *ChaosReport) readFailures() []string {
	if rep.UnexplainedReads == 0 || rep.breaks(true) {
		return nil
	}
	return []string{fmt.Sprintf("reads: %d reads showed a token that no acquire of their key could have carried", rep.UnexplainedReads)}
}

// Readers is how many clients of a campaign whose clients read do nothing
// else: they ask who holds a random key in a loop, so that reads are in
// flight on the leader whenever a pause fault stops it, and are answered
// (or refused) by it when it resumes, deposed — where etcd's
// deterministic-simulation tests found stale reads (etcd#20418). The
// lockers and writers read too, but they are mostly waiting on an acquire
// or a release when the leader stops.
const Readers = 4

// startReaders opens the Readers clients (ids after the campaign's
// clients) and starts their loops in wg until runCtx ends; closeAll closes
// their Lockers.
func (w *Workload) startReaders(runCtx context.Context, tg *Target, wg *sync.WaitGroup) (closeAll func(), err error) {
	var ls []lock.Locker
	closeAll = func() {
		for _, l := range ls {
			l.Close()
		}
	}
	if !w.reads.on {
		return closeAll, nil
	}
	for j := range Readers {
		id := w.cfg.Clients + j
		l, _, err := tg.newClient(id)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("reader %d: %w", id, err)
		}
		ls = append(ls, l)
		rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(id)+1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				w.inspect(runCtx, id, l, fmt.Sprintf("chaos/%d", rng.IntN(w.cfg.Keys)))
				provision.SleepCtx(runCtx, provision.Between(rng, 0, 10*time.Millisecond))
			}
		}()
	}
	return closeAll, nil
}
