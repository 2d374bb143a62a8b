package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

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
