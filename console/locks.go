package console

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/lockgate/lockgate/internal/nodeview"
	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

type lockJSON struct {
	Key     string       `json:"key"`
	Mode    string       `json:"mode"`
	Permits int          `json:"permits"`
	Waiters int          `json:"waiters"`
	DelayMs int64        `json:"delayMs"`
	Holders []holderJSON `json:"holders"`
}

// lockDetailJSON is one key with its queue.
type lockDetailJSON struct {
	lockJSON
	Queue []waiterJSON `json:"queue"`
}

type waiterJSON struct {
	Owner     string   `json:"owner"`
	Mode      string   `json:"mode"`
	Permits   int      `json:"permits"`
	Keys      []string `json:"keys"`
	WaitingMs int64    `json:"waitingMs"`
}

type locksReply struct {
	Total        int        `json:"total"`
	Matched      int        `json:"matched"`
	Next         string     `json:"next"`
	WaitersKnown bool       `json:"waitersKnown"`
	Node         string     `json:"node"`
	ScanMs       float64    `json:"scanMs"`
	Locks        []lockJSON `json:"locks"`
	// Filtered: the page shows only the keys the credential's identity
	// may read, and total and matched count those of the page only.
	Filtered bool `json:"filtered,omitempty"`
}

func modeName(m lock.Mode) string {
	if m == lock.ModeShared {
		return wire.ModeShared
	}
	return wire.ModeExclusive
}

func lockOf(l nodeview.Lock) lockJSON {
	j := lockJSON{Key: l.Key, Mode: modeName(l.Mode), Permits: l.Permits, Waiters: l.Waiters,
		DelayMs: l.Delay.Milliseconds(), Holders: make([]holderJSON, 0, len(l.Holders))}
	for _, h := range l.Holders {
		j.Holders = append(j.Holders, holderJSON{Owner: h.Owner, Token: strconv.FormatUint(uint64(h.Token), 10),
			ExpiresInMs: max(h.ExpiresIn.Milliseconds(), 0), Value: strings.ToValidUTF8(string(h.Value), string(utf8.RuneError))})
	}
	return j
}

func (c *Console) locks(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.authorize(w, r); !ok {
		return
	}
	q := r.URL.Query()
	search, after := q.Get("q"), q.Get("after")
	if len(search) > MaxSearchBytes {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidKey, fmt.Sprintf("q is %d bytes, the most is %d", len(search), MaxSearchBytes))
		return
	}
	if len(after) > lock.MaxKeyLen {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidKey, fmt.Sprintf("after is %d bytes, longer than any key (%d)", len(after), lock.MaxKeyLen))
		return
	}
	limit := DefaultPageSize
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			writeError(w, http.StatusBadRequest, wire.CodeInvalidValue, fmt.Sprintf("limit %q: want 1 to %d", s, MaxPageSize))
			return
		}
		limit = n
	}
	if c.forward(w, r) {
		return
	}
	page := c.n.ScanLocks(search, after, limit)
	rep := locksReply{Total: page.Total, Matched: page.Matched, Next: page.Next, WaitersKnown: page.WaitersKnown,
		Node: c.n.ID(), ScanMs: float64(page.Scan.Microseconds()) / 1000, Locks: make([]lockJSON, 0, len(page.Locks))}
	visible := c.visible(r)
	for _, l := range page.Locks {
		if visible(l.Key) {
			rep.Locks = append(rep.Locks, lockOf(l))
		}
	}
	if c.filtered(r) {
		// The counts would say how many keys other tenants hold.
		rep.Total, rep.Matched, rep.Filtered = len(rep.Locks), len(rep.Locks), true
	}
	writeJSON(w, http.StatusOK, rep)
}

func (c *Console) lock(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.authorize(w, r); !ok {
		return
	}
	key := r.URL.Query().Get("key")
	if err := kit.ValidateKey(key); err != nil {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidKey, err.Error())
		return
	}
	if !c.visible(r)(key) {
		writeError(w, http.StatusForbidden, wire.CodeForbidden, "this credential's identity may not read key "+strconv.Quote(key)+" (the policy's rules)")
		return
	}
	if c.forward(w, r) {
		return
	}
	l, queue, err := c.n.LockDetail(key, MaxQueueListed)
	if err != nil {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidKey, err.Error())
		return
	}
	j := lockDetailJSON{lockJSON: lockOf(l)}
	j.Queue = make([]waiterJSON, 0, len(queue))
	for _, q := range queue {
		j.Queue = append(j.Queue, waiterJSON{Owner: q.Owner, Mode: modeName(q.Mode), Permits: q.Permits, Keys: q.Keys,
			WaitingMs: q.Waiting.Milliseconds()})
	}
	writeJSON(w, http.StatusOK, j)
}
