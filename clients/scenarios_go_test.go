package clients_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/election"
)

// scenarioTimeout bounds one Go scenario.
const scenarioTimeout = 60 * time.Second

// Default bounds of a step (the step's withinMs overrides them): a call,
// and a wait for something pushed (an answer of an async call, an event).
const (
	callBound = 15 * time.Second
	waitBound = 10 * time.Second
)

// runGo runs the scenario set with the Go SDK, one subtest per scenario,
// and prints the runners' common line per scenario ("ok NAME 123ms" or
// "FAIL NAME: reason").
func runGo(t *testing.T, h *harness, set scenarioSet) {
	run := lock.NewHandle()[:8]
	for _, s := range set.Scenarios {
		t.Run(s.Name, func(t *testing.T) {
			start := time.Now()
			if err := runGoScenario(h, s, run, t.Logf); err != nil {
				t.Errorf("FAIL %s: %v", s.Name, err)
				return
			}
			t.Logf("ok %s %dms", s.Name, time.Since(start).Milliseconds())
		})
	}
}

// runGoScenario interprets s's steps with the Go SDK and returns nil or
// why it failed. It closes what the steps opened and, after a step killed
// the leader, restores the cluster.
func runGoScenario(h *harness, s scenario, run string, logf func(string, ...any)) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	r := &goRun{
		h: h, logf: logf, s: s, run: run, ctx: ctx,
		key:         fmt.Sprintf("clients/go/%s/%s", run, s.Name),
		clients:     map[string]*client.Client{},
		leases:      map[string][]*lock.Lease{},
		owner:       map[*lock.Lease]*client.Client{},
		leaderships: map[string]*election.Leadership{},
		pending:     map[string]*pendingOp{},
		sessions:    map[string]*lock.Session{},
		watches:     map[string]*goWatch{},
		observers:   map[string]<-chan election.Leader{},
		events:      map[string]lock.Event{},
		marks:       map[string]time.Time{},
		ops:         map[string]map[string]float64{},
	}
	defer func() {
		if cerr := r.close(); err == nil {
			err = cerr
		}
	}()
	for i, st := range s.Steps {
		f, ok := goSteps[st.Do]
		if !ok {
			return fmt.Errorf("step %d: unknown step kind %q: the Go runner does not implement it", i+1, st.Do)
		}
		if err := f(r, st); err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, st.Do, err)
		}
	}
	return nil
}

// goRun is one scenario's run: its key and what its steps named.
type goRun struct {
	h    *harness
	logf func(string, ...any)
	s    scenario
	run  string
	key  string
	ctx  context.Context

	clients     map[string]*client.Client
	leases      map[string][]*lock.Lease       // a lease, a group ("l", and "l.0", "l.1", …), a leadership's lease
	owner       map[*lock.Lease]*client.Client // who was granted each lease
	leaderships map[string]*election.Leadership
	pending     map[string]*pendingOp
	sessions    map[string]*lock.Session
	watches     map[string]*goWatch
	observers   map[string]<-chan election.Leader
	events      map[string]lock.Event
	marks       map[string]time.Time
	ops         map[string]map[string]float64
	follower    string // the address a client "endpoints": "follower" was given
	killed      string // the address killLeader killed
	cleanup     []func()
}

type goWatch struct {
	ch     <-chan lock.Event
	cancel context.CancelFunc
}

// pendingOp is a call in flight: an acquire, an acquire-all or a campaign.
type pendingOp struct {
	done   chan struct{}
	keys   []string
	leases []*lock.Lease
	ld     *election.Leadership
	err    error
	at     time.Time // when the call returned
	cancel context.CancelFunc
	client *client.Client
}

func (r *goRun) close() error {
	for i := len(r.cleanup) - 1; i >= 0; i-- {
		r.cleanup[i]()
	}
	for _, c := range r.clients {
		c.Close()
	}
	if r.killed == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var body endpointsBody
	if err := r.control(ctx, http.MethodPost, "/restore", &body); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}

// control calls the harness's control API, as the other runners do, and
// decodes its answer into out.
func (r *goRun) control(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, r.h.control+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("control %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("control %s %s: %s: %s", method, path, resp.Status, body)
	}
	return json.Unmarshal(body, out)
}

type tWriter struct{ logf func(string, ...any) }

func (w tWriter) Write(p []byte) (int, error) {
	w.logf("%s", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func (r *goRun) newClient(name string, opts client.Options, endpoints []string) error {
	if _, dup := r.clients[name]; dup {
		return fmt.Errorf("client %q opened twice", name)
	}
	opts.ClientID = "go-" + name + "-" + r.run
	opts.Logger = slog.New(slog.NewTextHandler(tWriter{r.logf}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := client.New(endpoints, opts)
	if err != nil {
		return fmt.Errorf("client.New(%v): %w", endpoints, err)
	}
	r.clients[name] = c
	return nil
}

func (r *goRun) client(name string) (*client.Client, error) {
	c, ok := r.clients[name]
	if !ok {
		return nil, fmt.Errorf("no client %q (a client step opens it)", name)
	}
	return c, nil
}

// group is the leases a name stands for: one, or a group's.
func (r *goRun) group(name string) ([]*lock.Lease, error) {
	ls, ok := r.leases[name]
	if !ok || len(ls) == 0 {
		return nil, fmt.Errorf("no lease %q (not granted, or not yet awaited)", name)
	}
	return ls, nil
}

func (r *goRun) one(name string) (*lock.Lease, error) {
	ls, err := r.group(name)
	if err != nil {
		return nil, err
	}
	if len(ls) != 1 {
		return nil, fmt.Errorf("%q names %d leases, want one (name one as %s.0)", name, len(ls), name)
	}
	return ls[0], nil
}

func (r *goRun) mark(name string) (time.Time, error) {
	if name == "" || name == "now" {
		return time.Now(), nil
	}
	m, ok := r.marks[name]
	if !ok {
		return m, fmt.Errorf("no time mark %q", name)
	}
	return m, nil
}

// keyOf is the key a step names: the scenario's key with the step's
// suffix ("{i}" replaced by i), its raw key, or a key of keyBytes bytes.
func (r *goRun) keyOf(st step, i int) string {
	switch {
	case st.RawKey != nil:
		return *st.RawKey
	case st.KeyBytes > 0:
		return strings.Repeat("k", st.KeyBytes)
	case st.Key != nil:
		return r.key + strings.ReplaceAll(*st.Key, "{i}", strconv.Itoa(i))
	}
	return r.key
}

func within(st step, def time.Duration) time.Duration {
	if st.WithinMs != nil {
		return ms(*st.WithinMs)
	}
	return def
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// stop wraps a reason of pollUntil's cond that no further wait can change.
type stop struct{ error }

// pollUntil calls cond every 10 ms until it reports true, or ctx ends (then
// the last reason is returned), or cond's reason is a stop.
func pollUntil(ctx context.Context, what string, cond func() (bool, error)) error {
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if s, isStop := err.(stop); isStop {
			return fmt.Errorf("waiting for %s: %w", what, s.error)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// receive is the next value of ch (ok false: ch is closed), or an error
// after d, or ctx's error when it ends first.
func receive[T any](ctx context.Context, ch <-chan T, d time.Duration, what string) (v T, ok bool, err error) {
	select {
	case v, ok = <-ch:
		return v, ok, nil
	case <-time.After(d):
		return v, false, fmt.Errorf("%s: nothing within %v", what, d)
	case <-ctx.Done():
		return v, false, ctx.Err()
	}
}

// free checks that nobody holds key.
func free(ctx context.Context, c *client.Client, key string) error {
	info, err := c.Inspect(ctx, key)
	if !errors.Is(err, lock.ErrNotFound) {
		return fmt.Errorf("inspect %q: want not_found, got %+v, %v", key, info, err)
	}
	return nil
}

// holds checks that Inspect of the lease's key shows its owner and token.
func holds(ctx context.Context, c *client.Client, lease *lock.Lease) error {
	info, err := c.Inspect(ctx, lease.Key)
	if err != nil {
		return fmt.Errorf("inspect %q: %w", lease.Key, err)
	}
	if info.Token != lease.Token || info.Owner != lease.Owner {
		return fmt.Errorf("inspect %q: owner %q token %d, want %q token %d", lease.Key, info.Owner, info.Token, lease.Owner, lease.Token)
	}
	return nil
}
