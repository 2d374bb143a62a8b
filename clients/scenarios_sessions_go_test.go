package clients_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// The sessions scenarios, as the Go runner implements them (the
// TypeScript and Python runners mirror each step).
func init() {
	goScenarios["session-many-leases"] = sessionManyLeases
	goScenarios["session-close-releases"] = sessionCloseReleases
	goScenarios["session-expiry"] = sessionExpiry
	goScenarios["session-leader-killed"] = sessionLeaderKilled
}

// ops reads the harness's GET /ops: the lock operations the nodes
// committed as leaders, by op.
func (r *goRun) ops(ctx context.Context) (map[string]float64, error) {
	var body opsBody
	if err := r.control(ctx, http.MethodGet, "/ops", &body); err != nil {
		return nil, err
	}
	if body.Ops == nil {
		return nil, errors.New("GET /ops: no ops")
	}
	return body.Ops, nil
}

// sessionKeys are n keys under the scenario's key.
func sessionKeys(r *goRun, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/%d", r.key, i)
	}
	return keys
}

// lostWhileHeld returns an error naming the first lease of ls that ended.
func lostWhileHeld(ls []*lock.Lease) error {
	for _, l := range ls {
		select {
		case <-l.Done():
			return fmt.Errorf("lease of %q lost while held: %w", l.Key, l.Err())
		default:
		}
	}
	return nil
}

// session-many-leases: s.Leases auto-renewed leases of one client all go
// into its one session (TTL s.TTLMs); held for four TTLs, none is lost and
// each is still the holder on the server, while the server counted
// session keep-alives and fewer lease renewals than there are leases (one
// renewal per lease per TTL/3 would be 12 per lease).
func sessionManyLeases(ctx context.Context, r *goRun, s scenario) error {
	ttl := ttlOf(s)
	a := r.clientWith("A", client.Options{SessionTTL: ttl})
	before, err := r.ops(ctx)
	if err != nil {
		return err
	}
	keys := sessionKeys(r, s.Leases)
	leases := make([]*lock.Lease, 0, len(keys))
	defer func() {
		for _, l := range leases {
			a.Release(context.Background(), l)
		}
	}()
	for _, k := range keys {
		l, err := a.Acquire(ctx, k, lock.AcquireOptions{})
		if err != nil {
			return fmt.Errorf("A acquire %q: %w", k, err)
		}
		leases = append(leases, l)
	}
	sess := leases[0].Session()
	if sess == nil || sess.TTL() != ttl {
		return fmt.Errorf("A's first lease is in session %v: want the client's own, TTL %v", sess, ttl)
	}
	for _, l := range leases {
		if l.Session() != sess {
			return fmt.Errorf("lease of %q is in session %p, the first in %p: want one session", l.Key, l.Session(), sess)
		}
	}
	if n := sess.Leases(); n != len(keys) {
		return fmt.Errorf("the session holds %d leases, want %d", n, len(keys))
	}
	hold := time.NewTimer(4 * ttl)
	defer hold.Stop()
	tick := time.NewTicker(ttl / 10)
	defer tick.Stop()
	for held := false; !held; {
		select {
		case <-hold.C:
			held = true
		case <-tick.C:
			if err := lostWhileHeld(leases); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := lostWhileHeld(leases); err != nil {
		return err
	}
	for _, l := range leases {
		if !time.Now().Before(l.Deadline()) {
			return fmt.Errorf("lease of %q is past its deadline", l.Key)
		}
		if err := holds(ctx, a, l); err != nil {
			return err
		}
	}
	after, err := r.ops(ctx)
	if err != nil {
		return err
	}
	keepAlives, renewals := after["session-renew"]-before["session-renew"], after["renew"]-before["renew"]
	r.t.Logf("session-many-leases: %d leases held %v: %v session keep-alives, %v lease renewals on the server", len(keys), 4*ttl, keepAlives, renewals)
	if keepAlives < 3 || renewals >= float64(len(keys)) {
		return fmt.Errorf("the server committed %v session keep-alives and %v lease renewals while %d leases were held %v: want ≥ 3 keep-alives and fewer renewals than leases",
			keepAlives, renewals, len(keys), 4*ttl)
	}
	return nil
}

// session-close-releases: A holds two keys in a session it opened; B
// waits for the first; A's close of the session grants it to B (token
// above A's), A's leases end released, the second key is free, and a
// keep-alive of the closed session is refused.
func sessionCloseReleases(ctx context.Context, r *goRun, s scenario) error {
	a, b := r.client("A"), r.client("B")
	keys := sessionKeys(r, 2)
	sess, err := a.OpenSession(ctx, lock.SessionOptions{TTL: ttlOf(s)})
	if err != nil {
		return fmt.Errorf("A open session: %w", err)
	}
	kctx, stopKeepAlive := context.WithCancel(ctx)
	defer stopKeepAlive()
	go lock.KeepSessionAlive(kctx, a, sess)
	var las []*lock.Lease
	for _, k := range keys {
		l, err := a.Acquire(ctx, k, lock.AcquireOptions{Session: sess})
		if err != nil {
			return fmt.Errorf("A acquire %q in the session: %w", k, err)
		}
		las = append(las, l)
	}
	bch := acquireAsync(ctx, b, keys[0], lock.AcquireOptions{TTL: ttlOf(s)})
	if err := waiters(ctx, a, keys[0], 1); err != nil {
		return err
	}
	select {
	case got := <-bch:
		return fmt.Errorf("B's acquire answered while A's session holds the key: %+v", got)
	default:
	}
	if err := a.CloseSession(ctx, sess); err != nil {
		return fmt.Errorf("A close session: %w", err)
	}
	got, err := await(bch, 10*time.Second, "B's acquire after A closed its session")
	if err != nil {
		return err
	}
	if got.err != nil {
		return fmt.Errorf("B acquire: %w", got.err)
	}
	if got.lease.Token <= las[0].Token {
		return fmt.Errorf("B's token %d is not larger than A's %d", got.lease.Token, las[0].Token)
	}
	for _, l := range las {
		select {
		case <-l.Done():
			if !errors.Is(l.Err(), lock.ErrReleased) {
				return fmt.Errorf("A's lease of %q ended %v, want released", l.Key, l.Err())
			}
		default:
			return fmt.Errorf("A's lease of %q still lives after its session was closed", l.Key)
		}
	}
	if err := free(ctx, a, keys[1]); err != nil {
		return err
	}
	if err := a.RenewSession(ctx, sess); !errors.Is(err, lock.ErrSessionExpired) {
		return fmt.Errorf("A's keep-alive of the closed session: %v, want session expired", err)
	}
	return b.Release(ctx, got.lease)
}

// session-expiry: A holds three keys in a session whose keep-alive never
// runs; at the session's deadline every lease ends expired, B (waiting for
// the first key) is granted no earlier, with a larger token, the other
// keys become free, and a keep-alive of the session is refused.
func sessionExpiry(ctx context.Context, r *goRun, s scenario) error {
	a, b := r.client("A"), r.client("B")
	keys := sessionKeys(r, 3)
	sess, err := a.OpenSession(ctx, lock.SessionOptions{TTL: ttlOf(s)})
	if err != nil {
		return fmt.Errorf("A open session: %w", err)
	}
	var las []*lock.Lease
	for _, k := range keys {
		l, err := a.Acquire(ctx, k, lock.AcquireOptions{Session: sess})
		if err != nil {
			return fmt.Errorf("A acquire %q in the session: %w", k, err)
		}
		las = append(las, l)
	}
	bch := acquireAsync(ctx, b, keys[0], lock.AcquireOptions{TTL: 10 * time.Second})
	for _, l := range las {
		if _, err := await(l.Done(), ttlOf(s)+5*time.Second, "A's lease of "+l.Key+" to end"); err != nil {
			return err
		}
		if !errors.Is(l.Err(), lock.ErrExpired) {
			return fmt.Errorf("A's lease of %q ended %v, want expired", l.Key, l.Err())
		}
	}
	got, err := await(bch, 10*time.Second, "B's acquire after A's session expired")
	if err != nil {
		return err
	}
	if got.err != nil {
		return fmt.Errorf("B acquire: %w", got.err)
	}
	if got.at.Before(las[0].Deadline()) {
		return fmt.Errorf("B granted %v before A's deadline", las[0].Deadline().Sub(got.at))
	}
	if got.lease.Token <= las[0].Token {
		return fmt.Errorf("B's token %d is not larger than A's %d", got.lease.Token, las[0].Token)
	}
	for _, k := range keys[1:] {
		err := pollUntil(ctx, k+" to be free", func() (bool, error) {
			err := free(ctx, b, k)
			return err == nil, err
		})
		if err != nil {
			return err
		}
	}
	if err := a.RenewSession(ctx, sess); !errors.Is(err, lock.ErrSessionExpired) {
		return fmt.Errorf("A's keep-alive of the expired session: %v, want session expired", err)
	}
	return b.Release(ctx, got.lease)
}

// session-leader-killed: A's leases in its own session survive the
// leader's SIGKILL: a keep-alive sent after the kill is answered (by the
// new leader: the session's deadline passes kill + TTL), no lease is lost,
// and the new leader shows each one held with its token.
func sessionLeaderKilled(ctx context.Context, r *goRun, s scenario) error {
	defer r.restoreAfter()
	ttl := ttlOf(s)
	a := r.clientWith("A", client.Options{SessionTTL: ttl})
	var las []*lock.Lease
	for _, k := range sessionKeys(r, 3) {
		l, err := a.Acquire(ctx, k, lock.AcquireOptions{})
		if err != nil {
			return fmt.Errorf("A acquire %q: %w", k, err)
		}
		las = append(las, l)
	}
	sess := las[0].Session()
	if sess == nil {
		return errors.New("A's lease is in no session")
	}
	var killed map[string]string
	if err := r.control(ctx, http.MethodPost, "/kill-leader", &killed); err != nil {
		return err
	}
	killedAt := time.Now()
	fctx, cancel := context.WithTimeout(ctx, failoverBound)
	defer cancel()
	err := pollUntil(fctx, "a keep-alive after the kill", func() (bool, error) {
		if err := lostWhileHeld(las); err != nil {
			return false, stop{err}
		}
		return sess.Deadline().After(kit.DeadlineFor(killedAt, ttl, 0)),
			fmt.Errorf("session deadline %v after the kill", sess.Deadline().Sub(killedAt))
	})
	if err != nil {
		return fmt.Errorf("killed %s: %w", killed["killed"], err)
	}
	if err := r.failedOver(fctx, killed["killed"]); err != nil {
		return err
	}
	for _, l := range las {
		if l.Deadline() != sess.Deadline() {
			return fmt.Errorf("lease of %q: deadline %v, its session's %v", l.Key, l.Deadline(), sess.Deadline())
		}
		if err := holds(fctx, a, l); err != nil {
			return err
		}
	}
	for _, l := range las {
		if err := a.Release(fctx, l); err != nil {
			return fmt.Errorf("release %q: %w", l.Key, err)
		}
	}
	return nil
}

// TestSumOps: GET /ops counts lockgate_raftlock_ops_total by its op label
// and nothing else (another metric, a longer name, a sample without op).
func TestSumOps(t *testing.T) {
	page := `# HELP lockgate_raftlock_ops_total Operations.
# TYPE lockgate_raftlock_ops_total counter
lockgate_raftlock_ops_total{op="renew"} 3
lockgate_raftlock_ops_total{node="1",op="session-renew"} 12
lockgate_raftlock_ops_total_created{op="renew"} 1.7e9
lockgate_raftlock_entries_total 40
lockgate_raftlock_ops_total{node="1"} 5
other_ops_total{op="renew"} 100
`
	ops := map[string]float64{"renew": 1}
	if err := sumOps(strings.NewReader(page), ops); err != nil {
		t.Fatal(err)
	}
	if len(ops) != 2 || ops["renew"] != 4 || ops["session-renew"] != 12 {
		t.Fatalf("ops %v, want renew 4 (1 + 3), session-renew 12, nothing else", ops)
	}
}
