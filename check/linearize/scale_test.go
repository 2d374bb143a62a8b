package linearize

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lockgate/lockgate/check"
)

// campaignHistory is what a campaign against a correct lock records:
// clients cycle acquire → fenced write → unfenced write → hold (up to 20
// ms) → release over keys keys, a key granted only after its previous
// holder's release began. About 1% of the acquires are not granted and 1%
// of the releases time out (unknown). It has cycles grants.
func campaignHistory(seed uint64, cycles, clients, keys int) check.History {
	rng := rand.New(rand.NewPCG(seed, 1))
	const ttl = 2 * time.Second
	us := func(lo, hi int) time.Duration {
		return time.Duration(lo+rng.IntN(hi-lo)) * time.Microsecond
	}
	clientFree := make([]time.Duration, clients)
	keyFree := make([]time.Duration, keys)
	token := make([]uint64, keys)
	var fseq, useq uint64
	hist := make(check.History, 0, 4*cycles+cycles/50)
	for i := 0; len(hist) < cap(hist) && i < 2*cycles; i++ {
		c, k := i%clients, rng.IntN(keys)
		key := fmt.Sprintf("chaos/%d", k)
		start := clientFree[c] + us(0, 1000)
		if rng.IntN(100) == 0 {
			end := start + us(100, 2000)
			hist = append(hist, check.Op{Client: c, Key: key, Kind: check.Acquire, Start: start, End: end, TTL: ttl})
			clientFree[c] = end
			continue
		}
		granted := max(start, keyFree[k]) + us(200, 1000)
		token[k] += 1 + uint64(rng.IntN(2)) // gaps are fine
		tok := token[k]
		hist = append(hist, check.Op{Client: c, Key: key, Kind: check.Acquire, Start: start, End: granted, OK: true, Token: tok,
			TTL: ttl, Deadline: start + ttl - 22*time.Millisecond})
		fseq++
		w := granted + us(10, 100)
		hist = append(hist, check.Op{Client: c, Key: key, Kind: check.Write, Fenced: true, Start: granted, End: w, OK: true, Token: tok, StoreSeq: fseq})
		useq++
		hist = append(hist, check.Op{Client: c, Key: key, Kind: check.Write, Start: w, End: w + us(1, 10), OK: true, Token: tok, StoreSeq: useq})
		relStart := w + us(10, 20000)
		relEnd := relStart + us(200, 1000)
		rel := check.Op{Client: c, Key: key, Kind: check.Release, Start: relStart, End: relEnd, OK: true, Token: tok}
		if rng.IntN(100) == 0 {
			rel.OK, rel.Unknown = false, true
		}
		hist = append(hist, rel)
		keyFree[k] = relStart + (relEnd-relStart)/2
		clientFree[c] = relEnd
	}
	return hist
}

func grants(h check.History) int {
	n := 0
	for _, o := range h {
		if o.Kind == check.Acquire && o.OK {
			n++
		}
	}
	return n
}

// TestCheckScale runs every checker over a correct 100k-cycle history, then
// over the same history with one token repeated: the checkers finish (no
// timing is asserted here: see BenchmarkCheck100k), find nothing in the
// first and the repeat, by name and on its key only, in the second.
func TestCheckScale(t *testing.T) {
	if testing.Short() {
		t.Skip("100k cycles")
	}
	hist := campaignHistory(1, 100_000, 32, 16)
	if n := grants(hist); n < 100_000 {
		t.Fatalf("%d grants, want 100k", n)
	}
	faults := []check.Fault{{Name: "kill", Start: 10 * time.Second, Heal: 12 * time.Second}}
	r := Check(hist, faults, check.Options{})
	if r.Overlaps != 0 || r.StaleWritesAccepted != 0 || r.UnfencedConflicts != 0 || !r.Linearizable ||
		r.TokensReused != 0 || r.TokenRegressions != 0 || len(r.LinearizabilityKeys) != 16 || r.LinearizabilityUnknownKeys != 0 {
		t.Fatalf("correct history: overlaps %d %q, stale accepted %d, unfenced %d, linearizable %v (%v, %d keys, %d unknown), tokens reused %d, regressions %d %q",
			r.Overlaps, r.OverlapExamples, r.StaleWritesAccepted, r.UnfencedConflicts, r.Linearizable, r.LinearizabilityResult,
			len(r.LinearizabilityKeys), r.LinearizabilityUnknownKeys, r.TokensReused, r.TokenRegressions, r.TokenExamples)
	}
	if len(r.Availability) != 1 || r.Availability[0].Count != 1 || r.Availability[0].Unserved != 0 {
		t.Errorf("availability %+v", r.Availability)
	}

	// Repeat one grant's token in the second half: its key, and only its
	// key, is not linearizable, and the token check names it.
	bad := append(check.History(nil), hist...)
	last := map[string]uint64{}
	var key string
	for i, o := range bad {
		if o.Kind != check.Acquire || !o.OK {
			continue
		}
		if prev, ok := last[o.Key]; ok && i > len(bad)/2 {
			bad[i].Token, key = prev, o.Key
			break
		}
		last[o.Key] = o.Token
	}
	r = Check(bad, faults, check.Options{})
	if r.Linearizable || r.LinearizabilityResult != porcupine.Illegal || fmt.Sprint(r.NotOkKeys()) != fmt.Sprint([]string{key}) ||
		r.TokensReused != 1 {
		t.Errorf("repeated token on %s: linearizable %v (%v), not Ok %v, tokens reused %d; want false (Illegal), [%s], 1",
			key, r.Linearizable, r.LinearizabilityResult, r.NotOkKeys(), r.TokensReused, key)
	}
}

// BenchmarkCheck100k is the checkers' time on a 100k-cycle campaign
// history (32 clients, 16 keys), which `bench chaos` must check within 2
// minutes of its end.
func BenchmarkCheck100k(b *testing.B) {
	hist := campaignHistory(1, 100_000, 32, 16)
	b.ResetTimer()
	for range b.N {
		if r := Check(hist, nil, check.Options{}); !r.Linearizable {
			b.Fatalf("not linearizable: %v", r.LinearizabilityResult)
		}
	}
}
