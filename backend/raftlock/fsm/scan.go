package fsm

import (
	"container/heap"
	"strings"
)

// MaxScanLimit bounds the keys one ScanLocks returns.
const MaxScanLimit = 500

// scanChunk is how many keys ScanLocks visits per hold of the read lock.
const scanChunk = 4096

// ScanResult is a page of the lock table's keys (ScanLocks).
type ScanResult struct {
	Keys    []string // in key order, at most the limit
	More    bool     // keys after the last one match too
	Total   int      // keys held (exclusive or shared), expired ones included
	Matched int      // of those, keys containing the search string
}

// ScanLocks returns, in key order, the first limit (1..MaxScanLimit) held
// keys after the key after ("" for the first page) that contain contains
// ("" for every key), with the table's size. The table is a hash map, not
// a sorted index (an index would cost every lease memory and every grant
// time): a scan visits every key once, keeping the limit smallest keys
// after the cursor in a bounded heap, so its cost is O(n log limit) time
// and O(limit) memory (about 0.1–0.2 s at a million keys here:
// BenchmarkScanLocks1M). It holds the read lock for scanChunk keys at a
// time, not for the whole table, so Apply waits for one chunk at most; a
// page is therefore the table during the scan, not at one instant: a key
// granted or released meanwhile may be listed or not (the spec's rule for
// a map changed during a range, which the lock makes safe here). Its
// callers (the web console) run one at a time per node.
func (f *FSM) ScanLocks(after, contains string, limit int) ScanResult {
	limit = min(max(limit, 1), MaxScanLimit)
	h := &keyHeap{}
	var res ScanResult
	consider := func(key string) {
		if contains != "" && !strings.Contains(key, contains) {
			return
		}
		res.Matched++
		if key <= after && after != "" {
			return
		}
		if h.Len() <= limit { // keep limit+1: the extra one says there is more
			heap.Push(h, key)
			return
		}
		if key < (*h)[0] {
			(*h)[0] = key
			heap.Fix(h, 0)
		}
	}
	seen := 0
	pause := func() {
		if seen++; seen%scanChunk == 0 {
			f.mu.RUnlock()
			f.mu.RLock()
		}
	}
	f.mu.RLock()
	for k := range f.kv {
		if strings.HasPrefix(k, lockPrefix) {
			consider(k[len(lockPrefix):])
		}
		pause()
	}
	for k := range f.groups {
		consider(k)
		pause()
	}
	res.Total = f.nlocks + len(f.groups)
	f.mu.RUnlock()
	keys := make([]string, h.Len())
	for i := len(keys) - 1; i >= 0; i-- {
		keys[i] = heap.Pop(h).(string)
	}
	if len(keys) > limit {
		keys, res.More = keys[:limit], true
	}
	res.Keys = keys
	return res
}

// keyHeap is a max-heap of keys: its root is the largest kept.
type keyHeap []string

func (h keyHeap) Len() int           { return len(h) }
func (h keyHeap) Less(i, j int) bool { return h[i] > h[j] }
func (h keyHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *keyHeap) Push(x any)        { *h = append(*h, x.(string)) }
func (h *keyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
