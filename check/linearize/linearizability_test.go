package linearize

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lockgate/lockgate/check"
	. "github.com/lockgate/lockgate/check/internal/checktest"
)

func TestLinearizable(t *testing.T) {
	cases := []struct {
		name string
		h    check.History
		want bool
	}{
		{"empty", nil, true},
		{"correct sequential history", H(
			Acq(0, "k", 0, 1, 1, 1000, 900), Rel(0, "k", 5, 6, 1),
			Acq(1, "k", 7, 8, 2, 1000, 900), Rel(1, "k", 9, 10, 2),
			Acq(0, "k", 11, 12, 7, 1000, 900), Rel(0, "k", 13, 14, 7), // gaps in tokens are fine
		), true},
		{"concurrent acquires, one waits for the release", H(
			Acq(0, "k", 0, 1, 1, 1000, 900),
			Acq(1, "k", 2, 8, 2, 1000, 900), // returned after the release below
			Rel(0, "k", 5, 6, 1),
			Rel(1, "k", 9, 10, 2),
		), true},
		{"release and grant concurrent", H(
			Acq(0, "k", 0, 1, 1, 1000, 900),
			Rel(0, "k", 5, 7, 1),
			Acq(1, "k", 2, 6, 2, 1000, 900), // the release may have taken effect before it
		), true},
		{"two overlapping grants without expiry possibility", H(
			Acq(0, "k", 0, 1, 1, 1000, 900),
			Acq(1, "k", 5, 6, 2, 1000, 900),
		), false},
		{"grant after the previous holder's TTL elapsed", H(
			Acq(0, "k", 0, 1, 1, 100, 90),
			Acq(1, "k", 50, 150, 2, 100, 140),
			RelNotHeld(0, "k", 200, 201, 1),
			Rel(1, "k", 202, 203, 2),
		), true},
		{"grant just before the previous holder's TTL", H(
			Acq(0, "k", 0, 1, 1, 100, 90),
			Acq(1, "k", 50, 90, 2, 100, 140), // expiry ≥ 0+100−drift(3 ms) = 97
		), false},
		{"a session lease's grant may expire at its deadline, before start + TTL", H(
			Session(Acq(0, "k", 0, 1, 1, 100, 60)),
			Acq(1, "k", 50, 70, 2, 100, 160), // after 60, before 97
		), true},
		{"a session lease's grant does not expire before its deadline", H(
			Session(Acq(0, "k", 0, 1, 1, 100, 60)),
			Acq(1, "k", 20, 50, 2, 100, 140),
		), false},
		{"token does not increase", H(
			Acq(0, "k", 0, 1, 5, 1000, 900), Rel(0, "k", 5, 6, 5),
			Acq(1, "k", 7, 8, 5, 1000, 900),
		), false},
		{"token decreases", H(
			Acq(0, "k", 0, 1, 5, 1000, 900), Rel(0, "k", 5, 6, 5),
			Acq(1, "k", 7, 8, 4, 1000, 900),
		), false},
		{"tokens of concurrent grants must increase in some order", H(
			Acq(0, "k", 0, 10, 5, 50, 40),
			Acq(1, "k", 0, 200, 5, 50, 190),
		), false},
		{"release OK by a non-holder", H(
			Acq(0, "k", 0, 1, 1, 1000, 900),
			Rel(1, "k", 5, 6, 1),
		), false},
		{"release OK of a wrong token", H(
			Acq(0, "k", 0, 1, 2, 1000, 900),
			Rel(0, "k", 5, 6, 1),
		), false},
		{"release OK twice", H(
			Acq(0, "k", 0, 1, 1, 1000, 900),
			Rel(0, "k", 5, 6, 1),
			Rel(0, "k", 7, 8, 1),
		), false},
		{"release not-held of a live lease", H(
			Acq(0, "k", 0, 1, 1, 1000, 900),
			RelNotHeld(0, "k", 5, 6, 1),
		), false},
		{"release not-held after the lease expired", H(
			Acq(0, "k", 0, 1, 1, 100, 90),
			RelNotHeld(0, "k", 150, 151, 1),
			Acq(1, "k", 152, 153, 2, 100, 240),
		), true},
		{"release not-held of someone else's lease", H(
			Acq(0, "k", 0, 1, 1, 1000, 900),
			RelNotHeld(1, "k", 5, 6, 7),
			Rel(0, "k", 7, 8, 1),
		), true},
		{"unknown acquire followed by a grant to another client with a higher token", H(
			AcqUnknown(0, "k", 0, 10, 1000),
			Acq(1, "k", 20, 21, 2, 1000, 900),
			Rel(1, "k", 30, 31, 2),
		), true},
		{"unknown acquire may have taken the lock: next grant after its TTL", H(
			Acq(1, "k", 0, 1, 1, 100, 90), Rel(1, "k", 2, 3, 1),
			AcqUnknown(0, "k", 4, 10, 100),
			Acq(1, "k", 20, 200, 3, 100, 190), // token 2 may have gone to client 0
		), true},
		{"unknown acquire does not expire a live holder", H(
			Acq(0, "k", 0, 1, 1, 1000, 900),
			AcqUnknown(1, "k", 2, 3, 10),
			Acq(2, "k", 50, 51, 2, 1000, 900),
		), false},
		{"unknown acquire after a holder, next grant after both TTLs", H(
			Acq(0, "k", 0, 1, 1, 100, 90),
			AcqUnknown(1, "k", 2, 3, 100),
			Acq(2, "k", 50, 150, 3, 100, 140), // client 1 may have been granted 2 at 97+
		), true},
		{"unknown release, it took effect", H(
			Acq(0, "k", 0, 1, 1, 1000, 900),
			RelUnknown(0, "k", 5, 10, 1),
			Acq(1, "k", 20, 21, 2, 1000, 900),
		), true},
		{"unknown release, it did not take effect", H(
			Acq(0, "k", 0, 1, 1, 1000, 900),
			RelUnknown(0, "k", 5, 10, 1),
			Rel(0, "k", 20, 21, 1),
		), true},
		{"unknown release does not free someone else's lease", H(
			Acq(0, "k", 0, 1, 1, 1000, 900),
			RelUnknown(1, "k", 5, 10, 1),
			Acq(1, "k", 20, 21, 2, 1000, 900),
		), false},
		{"not-granted acquires are dropped", H(
			Acq(0, "k", 0, 1, 1, 1000, 900),
			AcqFail(1, "k", 2, 3, 1000),
			Rel(0, "k", 5, 6, 1),
			AcqFail(1, "k", 7, 8, 1000), // a failure while free tells nothing either
		), true},
		{"keys are independent", H(
			Acq(0, "a", 0, 1, 1, 1000, 900),
			Acq(1, "b", 2, 3, 1, 1000, 900),
			Rel(0, "a", 5, 6, 1),
			Rel(1, "b", 5, 6, 1),
		), true},
		{"writes are ignored", H(
			Acq(0, "k", 0, 1, 1, 1000, 900),
			Wr(1, "k", 2, 3, 0, true, 1),
			Rel(0, "k", 5, 6, 1),
		), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok, info := Linearizable(tc.h, 10*time.Second)
			if ok != tc.want {
				var buf bytes.Buffer
				for _, op := range tc.h {
					fmt.Fprintf(&buf, "\n  %v", op)
				}
				t.Fatalf("Linearizable = %v, want %v; history:%s", ok, tc.want, buf.String())
			}
			if len(tc.h) > 0 && info.PartialLinearizations() == nil {
				t.Errorf("no LinearizationInfo")
			}
		})
	}
}

func TestExpirySlack(t *testing.T) {
	hist := H(
		Acq(0, "k", 0, 1, 1, 100, 90),
		Acq(1, "k", 50, 98, 2, 100, 140),
	)
	// The default slack (1% + 2 ms) lets the lease end at 97 ms.
	if res, _ := LinearizabilityCheck(hist, check.Options{}); res != porcupine.Ok {
		t.Errorf("default slack: %v, want Ok", res)
	}
	exact := func(time.Duration) time.Duration { return 0 }
	if res, _ := LinearizabilityCheck(hist, check.Options{ExpirySlack: exact}); res != porcupine.Illegal {
		t.Errorf("no slack: %v, want Illegal", res)
	}
}

// simulate runs a correct lease lock server over keys keys and clients
// clients and records what the clients saw: n acquires and releases that
// were granted, confirmed or unknown (about 2% of them), plus the acquires
// that were not granted and the releases answered "not held".
func simulate(seed int64, n, keys, clients, unknownEvery int) check.History {
	rng := rand.New(rand.NewSource(seed))
	const ttl = 30 * time.Millisecond
	type server struct {
		held    bool
		client  int
		token   uint64
		expires time.Duration
		next    uint64
	}
	type lease struct {
		key   string
		token uint64
	}
	srv := make(map[string]*server)
	for k := 0; k < keys; k++ {
		srv[fmt.Sprint("key", k)] = &server{next: 1}
	}
	busy := make([]time.Duration, clients) // each client's last return
	holding := make([]*lease, clients)
	var hist check.History
	counted := 0
	now := time.Duration(0)
	jitter := func() time.Duration { return time.Duration(rng.Int63n(int64(2 * time.Millisecond))) }
	for counted < n {
		now += 100*time.Microsecond + time.Duration(rng.Int63n(int64(900*time.Microsecond)))
		call, ret := now-jitter(), now+jitter()
		var idle []int
		for c := range clients {
			if busy[c] < call {
				idle = append(idle, c)
			}
		}
		if len(idle) == 0 || call < 0 {
			continue
		}
		c := idle[rng.Intn(len(idle))]
		unknown := rng.Intn(unknownEvery) == 0
		applied := !unknown || rng.Intn(2) == 0
		if l := holding[c]; l != nil {
			if rng.Intn(3) != 0 {
				continue // keeps holding; sometimes past its TTL
			}
			s := srv[l.key]
			op := check.Op{Client: c, Key: l.key, Kind: check.Release, Start: call, End: ret, Token: l.token, Unknown: unknown}
			live := s.held && s.client == c && s.token == l.token && now < s.expires
			if applied && live {
				s.held = false
			}
			op.OK = !unknown && live
			if op.OK || op.Unknown {
				counted++
			}
			hist = append(hist, op)
			holding[c] = nil
			busy[c] = ret
			continue
		}
		key := fmt.Sprint("key", rng.Intn(keys))
		for try := 0; try < 3 && srv[key].held && now < srv[key].expires; try++ {
			key = fmt.Sprint("key", rng.Intn(keys)) // prefer a free key
		}
		s := srv[key]
		op := check.Op{Client: c, Key: key, Kind: check.Acquire, Start: call, End: ret, TTL: ttl, Unknown: unknown}
		if applied && (!s.held || now >= s.expires) {
			tok := s.next + uint64(rng.Intn(3))
			*s = server{held: true, client: c, token: tok, expires: now + ttl, next: tok + 1}
			if !unknown {
				op.OK, op.Token = true, tok
				op.Deadline = call + ttl - 2*time.Millisecond
				holding[c] = &lease{key, tok}
			}
		}
		if op.OK || op.Unknown {
			counted++
		}
		hist = append(hist, op)
		busy[c] = ret
	}
	return hist
}

func TestLinearizableRandom(t *testing.T) {
	hist := simulate(1, 2000, 4, 8, 50)
	var unknown, granted, failed int
	for _, op := range hist {
		switch {
		case op.Unknown:
			unknown++
		case op.Kind == check.Acquire && op.OK:
			granted++
		case op.Kind == check.Acquire:
			failed++
		}
	}
	t.Logf("%d ops: %d granted, %d not granted, %d unknown", len(hist), granted, failed, unknown)
	if unknown == 0 || failed == 0 || granted < 300 {
		t.Fatalf("the simulated history is too tame")
	}

	limit := 2 * time.Second
	if raceEnabled {
		limit *= 10
	}
	start := time.Now()
	ok, _ := Linearizable(hist, time.Minute)
	if el := time.Since(start); el > limit {
		t.Errorf("took %v, more than %v", el, limit)
	}
	if !ok {
		t.Fatal("a correct lock's history is not linearizable")
	}
	if n, ex := check.Overlaps(hist); n != 0 {
		t.Errorf("a correct lock's history has %d overlaps: %q", n, ex)
	}

	t.Run("corrupted token", func(t *testing.T) {
		bad := append(check.History(nil), hist...)
		last := make(map[string]uint64)
		corrupted := false
		for i, op := range bad {
			if op.Kind != check.Acquire || !op.OK {
				continue
			}
			if prev, ok := last[op.Key]; ok && i > len(bad)/2 {
				bad[i].Token = prev // repeats the previous grant's token
				corrupted = true
				break
			}
			last[op.Key] = op.Token
		}
		if !corrupted {
			t.Fatal("nothing to corrupt")
		}
		checkIllegal(t, bad, limit)
	})
	t.Run("corrupted release", func(t *testing.T) {
		bad := append(check.History(nil), hist...)
		corrupted := false
		for i, op := range bad {
			if op.Kind == check.Release && op.OK && i > len(bad)/2 {
				bad[i].Client = (op.Client + 1) % 8 // confirmed to a client that did not hold it
				corrupted = true
				break
			}
		}
		if !corrupted {
			t.Fatal("nothing to corrupt")
		}
		checkIllegal(t, bad, limit)
	})
}

func checkIllegal(t *testing.T, bad check.History, limit time.Duration) {
	t.Helper()
	start := time.Now()
	res, info := LinearizabilityCheck(bad, check.Options{LinearizabilityTimeout: time.Minute})
	if el := time.Since(start); el > limit {
		t.Errorf("took %v, more than %v", el, limit)
	}
	if res != porcupine.Illegal {
		t.Fatalf("corrupted history: %v, want Illegal", res)
	}
	if ok, _ := Linearizable(bad, time.Minute); ok {
		t.Fatal("Linearizable says true")
	}
	var buf bytes.Buffer
	if err := Visualize(bad, info, &buf); err != nil || buf.Len() == 0 {
		t.Fatalf("Visualize: %v, %d bytes", err, buf.Len())
	}
}

func TestVisualize(t *testing.T) {
	bad := H(
		Acq(0, "k", 0, 1, 1, 1000, 900),
		Acq(1, "k", 5, 6, 2, 1000, 900),
		Rel(0, "k", 7, 8, 1),
		AcqUnknown(2, "k", 9, 10, 1000),
	)
	ok, info := Linearizable(bad, time.Second)
	if ok {
		t.Fatal("linearizable")
	}
	path := filepath.Join(t.TempDir(), "lin.html")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := Visualize(bad, info, f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 || !strings.Contains(strings.ToLower(string(data)), "<html") {
		t.Fatalf("not an HTML page: %d bytes", len(data))
	}
	if !strings.Contains(string(data), "acquire(c1") {
		t.Errorf("the page does not describe the operations")
	}

	// A zero info makes Visualize run the check itself.
	var buf bytes.Buffer
	if err := Visualize(bad, porcupine.LinearizationInfo{}, &buf); err != nil || buf.Len() == 0 {
		t.Fatalf("Visualize with zero info: %v, %d bytes", err, buf.Len())
	}
}

// TestPruningKeepsVerdict checks that leaving out unknown acquires and
// shortening unknown releases (Operations) gives the same verdict as the
// plain model where every unknown op returns after the history.
func TestPruningKeepsVerdict(t *testing.T) {
	verdict := func(hist check.History, keep bool) porcupine.CheckResult {
		return porcupine.CheckOperationsTimeout(lockModel, operations(hist, nil, keep), 2*time.Second)
	}
	legal, illegal := 0, 0
	for seed := int64(1); seed <= 300; seed++ {
		hist := simulate(seed, 16, 2, 4, 5)
		rng := rand.New(rand.NewSource(seed))
		if seed%3 != 0 { // corrupt two out of three
			i := rng.Intn(len(hist))
			op := &hist[i]
			switch {
			case op.Kind == check.Release && op.Unknown:
				op.Unknown, op.OK = false, rng.Intn(2) == 0
			case op.Kind == check.Release:
				op.OK = !op.OK
			case op.Kind == check.Acquire && op.OK:
				op.Token--
			case op.Kind == check.Acquire:
				op.Unknown, op.OK, op.Token, op.Deadline = false, true, uint64(rng.Intn(40)), op.Start+op.TTL
			}
		}
		pruned, plain := verdict(hist, false), verdict(hist, true)
		if plain == porcupine.Unknown {
			t.Logf("seed %d: unpruned search timed out", seed)
			continue
		}
		if pruned != plain {
			var b strings.Builder
			for _, op := range hist {
				fmt.Fprintf(&b, "\n  %v", op)
			}
			t.Fatalf("seed %d: pruned verdict %v, unpruned %v; history:%s", seed, pruned, plain, b.String())
		}
		if plain == porcupine.Ok {
			legal++
		} else {
			illegal++
		}
	}
	t.Logf("%d legal, %d illegal", legal, illegal)
	if legal < 50 || illegal < 50 {
		t.Fatalf("too one-sided: %d legal, %d illegal", legal, illegal)
	}
}

// waitingThroughOutage is n clients' acquires of one key waiting together
// through an outage and granted one by one when it heals, in token order,
// each holder releasing before the next grant returns (the shape of the
// raft fault campaign's chaos/2 around a kill-all: 28 waiting at once).
func waitingThroughOutage(n int) check.History {
	const ttl = 2 * time.Second
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	var h check.History
	for i := range n {
		start, granted := ms(10+i), ms(2000+20*i)
		tok := uint64(100 + i)
		h = append(h,
			check.Op{Client: i, Key: "k", Kind: check.Acquire, Start: start, End: granted, OK: true, Token: tok, TTL: ttl},
			check.Op{Client: i, Key: "k", Kind: check.Release, Start: granted + ms(5), End: granted + ms(10), OK: true, Token: tok})
	}
	return h
}

// TestGrantsInTokenOrder: many acquires waiting at once are decided at once
// (the search tried every increasing-token subset of them before the grants
// were ordered by token, and ran out of its time at n = 28); a grant whose
// release is confirmed before the previous token's grant is returned is
// still caught, and ordering the grants changes no verdict against the
// plain model.
func TestGrantsInTokenOrder(t *testing.T) {
	h := waitingThroughOutage(40)
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(lockModel, Operations(h, nil), 10*time.Second)
	if res != porcupine.Ok {
		t.Fatalf("40 acquires waiting through an outage: %v after %v, want Ok", res, time.Since(start))
	}
	t.Logf("40 waiting acquires decided in %v", time.Since(start))

	bad := append(check.History(nil), h...)
	// The grant of token 120 (index 40) returns before the one of token
	// 119 was even granted, and its release is confirmed right away: 119's
	// grant can then only come after 120's, against the token order.
	bad[40].End, bad[41].Start, bad[41].End = bad[38].End-30*time.Millisecond, bad[38].End-25*time.Millisecond, bad[38].End-20*time.Millisecond
	start = time.Now()
	if res := porcupine.CheckOperationsTimeout(lockModel, Operations(bad, nil), 10*time.Second); res != porcupine.Illegal {
		t.Fatalf("a grant ahead of a lower token: %v after %v, want Illegal", res, time.Since(start))
	}
	small, smallBad := waitingThroughOutage(8), append(check.History(nil), waitingThroughOutage(8)...)
	smallBad[8].End, smallBad[9].Start, smallBad[9].End = smallBad[6].End-30*time.Millisecond, smallBad[6].End-25*time.Millisecond, smallBad[6].End-20*time.Millisecond
	for _, c := range []struct {
		h    check.History
		want porcupine.CheckResult
	}{{small, porcupine.Ok}, {smallBad, porcupine.Illegal}} {
		for _, plain := range []bool{false, true} {
			if res := porcupine.CheckOperationsTimeout(lockModel, operations(c.h, nil, plain), 10*time.Second); res != c.want {
				t.Errorf("8 waiting acquires (plain model %v): %v, want %v", plain, res, c.want)
			}
		}
	}
}
