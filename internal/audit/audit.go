// Package audit writes the audit trail of a lock service shared by many
// tenants: who (identity), from where (remote address), did what (op), on
// which keys, on which node, with what result — including what nobody asked
// for at that moment, such as the release of a session's locks when the
// session expires.
//
// A Log writes one JSON object per line (see Event) to a file that it
// rotates by size: before a write that would push the file past
// Options.MaxBytes, path becomes path.1, path.1 becomes path.2 and so on up
// to path.N (N = Options.MaxFiles); the oldest is dropped. A line is never
// split across files. Files are created with mode 0600.
//
// # Cost to the caller
//
// Record never touches the disk. It encodes the event on the caller's
// goroutine and puts the line on a bounded in-memory queue
// (Options.QueueSize, 4096 by default) that one writer goroutine drains
// through a bufio.Writer, flushing whenever the queue empties.
//
// When the queue is full, Record waits for room — completeness of the
// audit trail comes before the speed of a lock operation — but at most
// Options.FullWait (1 s by default). An event still without room then is
// dropped and counted, and the Log sheds load: until the writer has emptied
// the queue, further Records that find it full drop their event at once
// instead of waiting too. A disk that stalls therefore costs the lock
// service one FullWait per stall, not one per operation. A full queue on
// a healthy disk (a burst) only ever makes Record wait.
//
// # Failures
//
// An I/O error (write, flush, open, rotation) never panics and never
// reaches the caller of Record: it is counted (Stats.Errors), the events it
// loses are counted (Stats.Dropped), and it is logged through slog once —
// further failures are counted silently until a write succeeds again, which
// is logged too. Flush and Close return the first error since the previous
// Flush. Close writes everything queued first, so on a disk that hangs it
// waits as long as the disk does.
//
// One Log, in one process, writes a given path: two would rotate each
// other's files.
//
// # Secrets
//
// Event has no field for a lease handle (the token that releases a lock), a
// session id, a bearer token or a lock's value, and none may be put in
// Detail: Record blanks a Detail that contains a run of 32 to 64 lowercase
// hex digits, the shape of handles and session ids (see Record).
package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Op is what an event records. The set is closed: the constants below.
// Refusals are not ops of their own: a refused grant is an event with
// OpGrant and a Result other than ResultOK.
type Op string

// The ops.
const (
	// OpGrant: a lock (or a read lock, a permit, a multi-key grant) was
	// granted, or the request for it was refused (Result).
	OpGrant Op = "grant"
	// OpRelease: the holder released a lock.
	OpRelease Op = "release"
	// OpExpire: a lease ran out without being renewed and was freed.
	OpExpire Op = "expire"
	// OpForceRelease: an administrator released someone else's lock.
	OpForceRelease Op = "force_release"
	// OpSessionOpen: a session was opened.
	OpSessionOpen Op = "session_open"
	// OpSessionClose: a session was closed by its client; its leases
	// were released with it.
	OpSessionClose Op = "session_close"
	// OpSessionExpire: a session ran out without a keep-alive; its leases
	// were released with it (Keys lists them).
	OpSessionExpire Op = "session_expire"
	// OpMemberAdd: a node was added to the cluster.
	OpMemberAdd Op = "member_add"
	// OpMemberRemove: a node was removed from the cluster.
	OpMemberRemove Op = "member_remove"
	// OpSnapshot: a snapshot was saved or restored (Detail says which).
	OpSnapshot Op = "snapshot"
	// OpPolicyReload: the access policy (identities, quotas) was
	// reloaded.
	OpPolicyReload Op = "policy_reload"
)

var ops = []Op{
	OpGrant, OpRelease, OpExpire, OpForceRelease,
	OpSessionOpen, OpSessionClose, OpSessionExpire,
	OpMemberAdd, OpMemberRemove, OpSnapshot, OpPolicyReload,
}

// Ops returns every Op, in the order of their declaration.
func Ops() []Op { return append([]Op(nil), ops...) }

// Valid reports whether o is one of the Op constants. Record writes an
// event whatever its Op, and Read accepts any (a newer version may add
// ops); Valid is for tests and tools.
func (o Op) Valid() bool {
	for _, k := range ops {
		if o == k {
			return true
		}
	}
	return false
}

// ResultOK is the Result of an operation that succeeded. Any other Result
// is the error code of the protocol that refused it ("forbidden",
// "quota_exceeded", "session_expired", …).
const ResultOK = "ok"

// Event is one line of the audit log.
//
// It deliberately has no field for secrets: not the lease handle that
// releases a lock, not a session id, not a bearer or admin token, not a
// lock's value. Whoever holds one of those can act as its owner, and an
// audit log is read by more people than should. Identity names the caller
// (or, for an event no request caused, the creator of the lease or
// session); it is never the credential that proved it. Detail is short free
// text, and Record blanks one that looks like it carries a handle or a
// session id.
type Event struct {
	// Time is when it happened, written in UTC as RFC 3339 with
	// nanoseconds (fixed width). Record fills in the Log's clock when it
	// is zero. Lines are in the order Records queued them, so events
	// recorded concurrently may be out of Time order by a few
	// microseconds.
	Time time.Time `json:"time"`
	// Node is the id of the node that wrote the event. Record fills in
	// Options.Node when it is empty.
	Node string `json:"node"`
	// Identity is the named identity of the caller, or of the creator of
	// the lease or session the event is about.
	Identity string `json:"identity"`
	// Remote is the remote address of the request that caused the event;
	// empty (and omitted) for an event no request caused.
	Remote string `json:"remote,omitempty"`
	// Op is what happened.
	Op Op `json:"op"`
	// Keys are the keys concerned, possibly none (written as []).
	Keys []string `json:"keys"`
	// FencingToken is the token of a grant (and of the lease a release or
	// an expiry ended); 0 (omitted) when there is none.
	FencingToken uint64 `json:"fencing_token,omitempty"`
	// Result is ResultOK or an error code.
	Result string `json:"result"`
	// Detail is optional short free text; Record cuts it to MaxDetail
	// bytes.
	Detail string `json:"detail,omitempty"`
}

// timeFormat is RFC 3339 with nanoseconds, fixed width so that lines sort
// and align as text.
const timeFormat = "2006-01-02T15:04:05.000000000Z07:00"

// wireEvent is Event as written: its time a preformatted string.
type wireEvent struct {
	Time         string   `json:"time"`
	Node         string   `json:"node"`
	Identity     string   `json:"identity"`
	Remote       string   `json:"remote,omitempty"`
	Op           Op       `json:"op"`
	Keys         []string `json:"keys"`
	FencingToken uint64   `json:"fencing_token,omitempty"`
	Result       string   `json:"result"`
	Detail       string   `json:"detail,omitempty"`
}

// MarshalJSON writes e as one line of the log (without the newline): its
// time in UTC with nine fractional digits, and its Keys as [] when nil.
func (e Event) MarshalJSON() ([]byte, error) {
	keys := e.Keys
	if keys == nil {
		keys = []string{}
	}
	return json.Marshal(wireEvent{
		Time:         e.Time.UTC().Format(timeFormat),
		Node:         e.Node,
		Identity:     e.Identity,
		Remote:       e.Remote,
		Op:           e.Op,
		Keys:         keys,
		FencingToken: e.FencingToken,
		Result:       e.Result,
		Detail:       e.Detail,
	})
}

// MaxDetail bounds Event.Detail, in bytes: Record cuts a longer one (at a
// UTF-8 boundary).
const MaxDetail = 512

// Defaults of Options.
const (
	DefaultMaxBytes  = 100 << 20
	DefaultMaxFiles  = 5
	DefaultQueueSize = 4096
	DefaultFullWait  = time.Second
)

// Options configure a Log. The zero value is usable.
type Options struct {
	// MaxBytes is the size a file may reach before the Log rotates it:
	// DefaultMaxBytes (100 MiB) when 0. A single line longer than that
	// is written whole, alone in its file.
	MaxBytes int64
	// MaxFiles is the number of rotated files kept (path.1 … path.N,
	// path.1 the newest), besides path itself: DefaultMaxFiles (5) when
	// 0.
	MaxFiles int
	// Node fills Event.Node when Record gets an event without one.
	Node string
	// Now fills Event.Time when Record gets an event without one:
	// time.Now when nil. It must be safe for concurrent use.
	Now func() time.Time
	// QueueSize bounds the events waiting for the writer:
	// DefaultQueueSize (4096) when 0.
	QueueSize int
	// FullWait bounds how long Record waits for room in a full queue
	// before it drops the event: DefaultFullWait (1 s) when 0; negative
	// means never wait.
	FullWait time.Duration
	// Logger receives the Log's own errors: slog.Default() when nil.
	Logger *slog.Logger
}

// Stats are a Log's counters, each monotonic. Once a Log is closed,
// Written + Dropped is the number of events Record accepted.
type Stats struct {
	// Written counts events handed to the file (the OS has them; no
	// fsync).
	Written uint64
	// Dropped counts events accepted by Record but never written: the
	// queue stayed full past FullWait, or an I/O error lost them.
	Dropped uint64
	// Errors counts I/O errors: failed writes, flushes, opens, rotations
	// and the final close.
	Errors uint64
	// Redacted counts events whose Detail Record blanked.
	Redacted uint64
	// Rotations counts files rotated.
	Rotations uint64
}

// Log is an audit log file. Its methods are safe for concurrent use, and
// a nil *Log does nothing, so that callers need no checks when auditing
// is off.
type Log struct {
	node     string
	now      func() time.Time
	fullWait time.Duration
	log      *slog.Logger

	// mu orders Record and Flush (read-locked while they queue) before
	// Close (write-locked while it closes queue).
	mu      sync.RWMutex
	closing bool
	queue   chan item
	done    chan struct{} // closed when the writer has ended
	closeEr error         // set by the writer before done

	// shedding is set when a Record gave up waiting for room, and cleared
	// when the writer empties the queue: meanwhile Records that find the
	// queue full drop at once.
	shedding atomic.Bool

	written, dropped, errs, redacted, rotations atomic.Uint64

	w *writer // the writer goroutine's
}

// item is a line to write, or a request to flush.
type item struct {
	line  []byte     // the event, newline included
	flush chan error // non-nil: flush, then send the first error since the last one
}

// hooks are the tests' handles on the writer.
type hooks struct {
	beforeWrite func() // called by the writer before it writes each event
	idle        func() // called by the writer when it has emptied the queue
}

// Open opens (creating it if need be, mode 0600) the audit log at path and
// starts its writer. An existing file is appended to. The directory must
// exist.
func Open(path string, opts Options) (*Log, error) {
	return open(path, opts, hooks{})
}

func open(path string, opts Options, h hooks) (*Log, error) {
	if path == "" {
		return nil, errors.New("audit log: no path")
	}
	switch {
	case opts.MaxBytes < 0:
		return nil, fmt.Errorf("audit log %s: MaxBytes %d is negative", path, opts.MaxBytes)
	case opts.MaxFiles < 0:
		return nil, fmt.Errorf("audit log %s: MaxFiles %d is negative", path, opts.MaxFiles)
	case opts.QueueSize < 0:
		return nil, fmt.Errorf("audit log %s: QueueSize %d is negative", path, opts.QueueSize)
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxFiles == 0 {
		opts.MaxFiles = DefaultMaxFiles
	}
	if opts.QueueSize == 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.FullWait == 0 {
		opts.FullWait = DefaultFullWait
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("audit log %s: directory %s does not exist", path, dir)
	case err != nil:
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("audit log %s: %s is not a directory", path, dir)
	}
	l := &Log{
		node:     opts.Node,
		now:      opts.Now,
		fullWait: opts.FullWait,
		log:      opts.Logger,
		queue:    make(chan item, opts.QueueSize),
		done:     make(chan struct{}),
	}
	l.w = &writer{l: l, path: path, maxBytes: opts.MaxBytes, maxFiles: opts.MaxFiles, hooks: h}
	if err := l.w.open(); err != nil {
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	go l.run()
	return l, nil
}

// Record queues e to be written. It fills in e.Time (the Log's clock) and
// e.Node (Options.Node) when they are zero, blanks e.Detail (counted in
// Stats.Redacted) when it contains a
// run of 32 to 64 lowercase hex digits — the shape of lease handles and
// session ids — rather than risk writing a secret: a run is a maximal
// sequence of the characters 0-9a-f, so a handle is caught inside a
// sentence or after a prefix, while a shorter hex id (8 to 16 digits: a
// cluster id, a short digest) passes. The guard is a net, not a licence:
// callers put no secrets in Detail. Then it cuts e.Detail to MaxDetail
// bytes.
//
// Record does no file I/O; when the queue is full it waits as the package
// documentation says. It does nothing on a nil or closed Log. It does not
// keep e.Keys.
func (l *Log) Record(e Event) {
	if l == nil {
		return
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closing {
		return
	}
	if e.Time.IsZero() {
		e.Time = l.now()
	}
	if e.Node == "" {
		e.Node = l.node
	}
	if hasHexSecret(e.Detail) { // before the cut, which could shorten a handle
		e.Detail = ""
		l.redacted.Add(1)
	}
	if len(e.Detail) > MaxDetail {
		e.Detail = cut(e.Detail, MaxDetail)
	}
	line, err := json.Marshal(e)
	if err != nil { // cannot happen: no field can fail to encode
		l.dropped.Add(1)
		l.errs.Add(1)
		l.log.Error("audit log: encoding an event failed", "path", l.w.path, "err", err)
		return
	}
	line = append(line, '\n')
	select {
	case l.queue <- item{line: line}:
		return
	default:
	}
	if l.fullWait < 0 || l.shedding.Load() {
		l.drop()
		return
	}
	t := time.NewTimer(l.fullWait)
	defer t.Stop()
	select {
	case l.queue <- item{line: line}:
	case <-t.C:
		if !l.shedding.Swap(true) {
			l.log.Warn("audit log: queue full; dropping events until the writer catches up",
				"path", l.w.path, "waited", l.fullWait)
		}
		l.drop()
	}
}

func (l *Log) drop() { l.dropped.Add(1) }

// Flush waits until every event recorded before the call has been handed
// to the file (no fsync), and returns the first I/O error since the
// previous Flush. It returns nil on a nil or closed Log (Close flushed).
func (l *Log) Flush() error {
	if l == nil {
		return nil
	}
	l.mu.RLock()
	if l.closing {
		l.mu.RUnlock()
		return nil
	}
	res := make(chan error, 1)
	l.queue <- item{flush: res} // waits for room: the writer is draining
	l.mu.RUnlock()
	return <-res
}

// Close writes every event recorded so far, closes the file and ends the
// writer; it returns the first I/O error since the previous Flush. Record
// and Flush do nothing afterwards; Close again returns nil.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.closing = true
	close(l.queue)
	l.mu.Unlock()
	<-l.done
	return l.closeEr
}

// Stats returns the counters (zero for a nil Log).
func (l *Log) Stats() Stats {
	if l == nil {
		return Stats{}
	}
	return Stats{
		Written:   l.written.Load(),
		Dropped:   l.dropped.Load(),
		Errors:    l.errs.Load(),
		Redacted:  l.redacted.Load(),
		Rotations: l.rotations.Load(),
	}
}

// Written is Stats().Written.
func (l *Log) Written() uint64 { return l.Stats().Written }

// Dropped is Stats().Dropped.
func (l *Log) Dropped() uint64 { return l.Stats().Dropped }

// Errors is Stats().Errors.
func (l *Log) Errors() uint64 { return l.Stats().Errors }

// Path returns the path of the current file ("" for a nil Log).
func (l *Log) Path() string {
	if l == nil {
		return ""
	}
	return l.w.path
}

// run is the writer goroutine.
func (l *Log) run() {
	defer close(l.done)
	w := l.w
	for it := range l.queue {
		if it.flush != nil {
			w.flush()
			it.flush <- w.takeErr()
			continue
		}
		if w.hooks.beforeWrite != nil {
			w.hooks.beforeWrite()
		}
		w.write(it.line)
		if len(l.queue) == 0 {
			w.flush()
			l.shedding.Store(false)
			if w.hooks.idle != nil {
				w.hooks.idle()
			}
		}
	}
	w.flush()
	w.close()
	l.closeEr = w.takeErr()
}

// writer is the file side of a Log, used by its writer goroutine only.
type writer struct {
	l        *Log
	path     string
	maxBytes int64
	maxFiles int
	hooks    hooks

	f       *os.File // nil after a failed open: the next write retries
	bw      *bufio.Writer
	size    int64 // of the file, buffered bytes included
	pending uint64
	newline bool // the file may end inside a line: start the next one on a new line

	failing  bool  // the last I/O operation failed; logged already
	firstErr error // since the last takeErr
}

const bufSize = 64 << 10

// open opens path for appending and learns its size.
func (w *writer) open() error {
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	w.f, w.size = f, fi.Size()
	if w.bw == nil {
		w.bw = bufio.NewWriterSize(f, bufSize)
	} else {
		w.bw.Reset(f)
	}
	w.newline = w.size > 0 && !endsInNewline(w.path, w.size)
	return nil
}

// endsInNewline reports whether the file at path, of size bytes, ends in
// '\n' (true when that cannot be read: better a line joined to a torn one
// than a blank line… which Read skips anyway).
func endsInNewline(path string, size int64) bool {
	f, err := os.Open(path)
	if err != nil {
		return true
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], size-1); err != nil {
		return true
	}
	return b[0] == '\n'
}

// write writes one line, rotating first if it would push the file past
// maxBytes.
func (w *writer) write(line []byte) {
	if w.f == nil {
		if err := w.open(); err != nil {
			w.fail("opening", err, 1)
			return
		}
	}
	if w.size > 0 && w.size+w.cost(line) > w.maxBytes {
		w.rotate()
		if w.f == nil { // rotate counted the error
			w.l.dropped.Add(1)
			return
		}
	}
	// Keep flushes at line boundaries, so that an error loses whole
	// events, counted.
	if w.bw.Buffered() > 0 && int64(w.bw.Available()) < w.cost(line) {
		w.flush()
	}
	if w.newline {
		if err := w.bw.WriteByte('\n'); err != nil {
			w.fail("writing", err, 1)
			w.reset()
			return
		}
		w.newline = false
		w.size++
	}
	if _, err := w.bw.Write(line); err != nil {
		w.fail("writing", err, 1)
		w.reset()
		return
	}
	w.size += int64(len(line))
	w.pending++
}

// cost is the number of bytes writing line adds to the file.
func (w *writer) cost(line []byte) int64 {
	if w.newline {
		return int64(len(line)) + 1
	}
	return int64(len(line))
}

// flush hands the buffered events to the file; it reports success.
func (w *writer) flush() bool {
	if w.f == nil || w.bw.Buffered() == 0 {
		return true
	}
	if err := w.bw.Flush(); err != nil {
		w.fail("writing", err, w.pending)
		w.pending = 0
		w.reset()
		return false
	}
	w.l.written.Add(w.pending)
	w.pending = 0
	if w.failing {
		w.failing = false
		w.l.log.Info("audit log: writing again", "path", w.path)
	}
	return true
}

// reset discards what the buffer holds after an error (bufio keeps an
// error for good) and learns the file's size again.
func (w *writer) reset() {
	w.bw.Reset(w.f)
	w.newline = true
	if fi, err := w.f.Stat(); err == nil {
		w.size = fi.Size()
	}
}

// rotate flushes and closes the file, shifts path.i to path.i+1 (dropping
// path.maxFiles), renames path to path.1 and opens a new path. When the
// renaming fails it goes on with the old file, so that no event is lost to
// a failed rotation; w.f is nil only when no file could be opened.
func (w *writer) rotate() {
	w.flush()
	if err := w.f.Close(); err != nil {
		w.fail("closing", err, 0)
	}
	w.f = nil
	for i := w.maxFiles - 1; i >= 1; i-- {
		err := os.Rename(w.name(i), w.name(i+1))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			w.fail("rotating", err, 0)
		}
	}
	if err := os.Rename(w.path, w.name(1)); err != nil {
		w.fail("rotating", err, 0)
	} else {
		w.l.rotations.Add(1)
	}
	if err := w.open(); err != nil {
		w.fail("opening", err, 0)
	}
}

func (w *writer) name(i int) string { return fmt.Sprintf("%s.%d", w.path, i) }

func (w *writer) close() {
	if w.f == nil {
		return
	}
	if err := w.f.Close(); err != nil {
		w.fail("closing", err, 0)
	}
	w.f = nil
}

// fail counts an I/O error and the events it lost, and logs it unless the
// previous operation failed too.
func (w *writer) fail(what string, err error, lost uint64) {
	w.l.errs.Add(1)
	w.l.dropped.Add(lost)
	if w.firstErr == nil {
		w.firstErr = fmt.Errorf("audit log %s: %s: %w", w.path, what, err)
	}
	if !w.failing {
		w.failing = true
		w.l.log.Error("audit log: "+what+" failed; further failures are counted, not logged, until a write succeeds",
			"path", w.path, "err", err, "lost_events", lost)
	}
}

func (w *writer) takeErr() error {
	err := w.firstErr
	w.firstErr = nil
	return err
}

// cut returns s cut to at most n bytes, at a UTF-8 boundary.
func cut(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// hasHexSecret reports whether s contains a maximal run of 32 to 64
// characters of 0-9a-f.
func hasHexSecret(s string) bool {
	run := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			run++
			continue
		}
		if run >= 32 && run <= 64 {
			return true
		}
		run = 0
	}
	return false
}

// Read parses an audit log: one JSON event per line, blank lines skipped.
// On a line that does not parse it returns the events before it and an
// error naming the line.
func Read(r io.Reader) ([]Event, error) {
	br := bufio.NewReader(r)
	var evs []Event
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var e Event
			if jerr := json.Unmarshal(line, &e); jerr != nil {
				return evs, fmt.Errorf("audit log line %d: %w", n, jerr)
			}
			evs = append(evs, e)
		}
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return evs, fmt.Errorf("audit log line %d: %w", n, err)
		}
	}
}

// ReadFile is Read of the file at path (one file: the rotated ones are
// path.1, path.2, …, oldest last).
func ReadFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	evs, err := Read(f)
	if err != nil {
		return evs, fmt.Errorf("%s: %w", path, err)
	}
	return evs, nil
}
