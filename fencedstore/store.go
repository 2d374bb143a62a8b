// Package fencedstore is the fenced data store of Martin Kleppmann's "How
// to do distributed locking" made real: a key-value store whose writes
// carry a fencing token and which rejects stale ones.
//
// A write whose token is lower than the highest token already accepted for
// its key is rejected (and counted); an equal or higher token is accepted.
// That is what protects the data from a lock holder that was paused past its
// lease: by the time it wakes and writes, the next holder has written with a
// higher token, and the late write is refused.
//
// Accepted writes are durable before they are acknowledged. The store is an
// append-only file of checksummed records (see format.go), and one writer
// goroutine group-commits: it takes every pending write, decides each in
// order against the highest tokens, appends them all, fsyncs once, and only
// then answers the callers. Open replays the file, cuts off a torn tail (a
// last record cut short by a crash, never acknowledged) and refuses a file
// with a complete record that fails its checksum, naming its offset: that
// may be an acknowledged write, and dropping it would take its key's highest
// token back.
//
// Keys obey the lock keys' rules (kit.ValidateKey): a key is the key of the
// lock whose fencing token guards the write.
//
// NewHandler serves the store over HTTP (POST /write, GET /read/{key},
// GET /stats, GET /healthz) and Client talks to it. Whoever can write can
// write a key's highest possible token and refuse every later writer, so a
// store reachable by others needs HandlerOptions.Authorize (the CLI's
// --auth-tokens-file) and clients WithToken.
package fencedstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Input limits. A key obeys the lock keys' rules (kit.ValidateKey): it is
// the key of the lock whose fencing token guards the write. A clientID is
// shown in answers and logs, so it is UTF-8 text without control characters
// too. The data file's format (maxPayload) depends on these bounds.
const (
	MaxKeyLen      = lock.MaxKeyLen // bytes
	MaxClientIDLen = 256            // bytes
	MaxDataLen     = 1 << 20        // bytes
)

var (
	// ErrStaleToken matches (errors.Is) every *StaleTokenError.
	ErrStaleToken = errors.New("fencedstore: stale fencing token")
	// ErrInvalid is wrapped by errors about malformed write requests.
	ErrInvalid = errors.New("fencedstore: invalid write")
	// ErrClosed is returned by writes to a closed store.
	ErrClosed = errors.New("fencedstore: store closed")
	// ErrCorrupt is wrapped by Open's errors about a damaged data file.
	ErrCorrupt = errors.New("fencedstore: data file corrupt")
	// ErrInvalidKey is wrapped by errors about a key that breaks the lock
	// keys' rules; it matches ErrInvalid too.
	ErrInvalidKey = fmt.Errorf("%w: fencingToken.key", ErrInvalid)
	// ErrInvalidClientID is wrapped by errors about a bad clientID; it
	// matches ErrInvalid too.
	ErrInvalidClientID = fmt.Errorf("%w: clientID", ErrInvalid)
	// ErrUnauthorized is the error of a request refused for want of a valid
	// bearer token (HTTP 401), the same whatever was wrong with it.
	ErrUnauthorized = errors.New("fencedstore: a valid bearer token is required (Authorization: Bearer <token>)")
)

// StaleTokenError reports a write refused because a higher token was already
// accepted for its key.
type StaleTokenError struct {
	Key     string
	Token   uint64 // the write's token
	Highest uint64 // the highest token accepted for Key
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fencedstore: stale fencing token %d for key %q: token %d was already accepted",
		e.Token, e.Key, e.Highest)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// FencingToken is a lock's fencing token (lock.Token) with the key it fences.
type FencingToken struct {
	Key   string `json:"key"`
	Value uint64 `json:"value"`
}

// WriteRequest is one write: the wire format is
// {"clientID": "...", "fencingToken": {"key": "...", "value": 12}, "data": "..."}.
type WriteRequest struct {
	ClientID string       `json:"clientID"`
	Token    FencingToken `json:"fencingToken"`
	Data     string       `json:"data"`
}

// WriteResult describes an accepted write.
type WriteResult struct {
	// Seq is the write's position in the log (1-based, counting accepted
	// and rejected writes since the file was created).
	Seq uint64
	// Previous is the key's highest token before this write, 0 when the key
	// had none.
	Previous uint64
}

// Record is the latest accepted write of a key.
type Record struct {
	Key      string       `json:"key"`
	Data     string       `json:"data"`
	ClientID string       `json:"clientID"`
	Token    FencingToken `json:"fencingToken"`
}

// Stats counts the store's decisions since the file was created.
type Stats struct {
	Accepted      uint64            `json:"accepted"`
	Rejected      uint64            `json:"rejected"`
	RejectedByKey map[string]uint64 `json:"rejectedByKey"`
	Keys          int               `json:"keys"`
	// RepairedBytes is how many bytes of torn tail Open cut off.
	RepairedBytes int64 `json:"repairedBytes"`
}

// Options configure Open. The zero value is ready to use.
type Options struct {
	// Logger receives repair notices and I/O failures; nil discards them.
	Logger *slog.Logger
	// MaxBatch bounds the writes sharing one fsync (default 4096).
	MaxBatch int
}

// Validate reports why req cannot be written, as an error wrapping ErrInvalid.
// A bad key wraps ErrInvalidKey, a bad clientID ErrInvalidClientID.
func (req *WriteRequest) Validate() error {
	if err := kit.ValidateKey(req.Token.Key); err != nil {
		if ve := (*lock.ValidationError)(nil); errors.As(err, &ve) {
			return fmt.Errorf("%w %s %s", ErrInvalidKey, ve.Value, ve.Reason)
		}
		return fmt.Errorf("%w: %v", ErrInvalidKey, err)
	}
	switch id := req.ClientID; {
	case id == "":
		return fmt.Errorf("%w is empty", ErrInvalidClientID)
	case len(id) > MaxClientIDLen:
		return fmt.Errorf("%w is %d bytes, limit %d", ErrInvalidClientID, len(id), MaxClientIDLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w %q is not valid UTF-8", ErrInvalidClientID, id)
	case strings.IndexFunc(id, isControl) >= 0:
		return fmt.Errorf("%w %q contains a control character", ErrInvalidClientID, id)
	}
	switch {
	case len(req.Data) > MaxDataLen:
		return fmt.Errorf("%w: data is %d bytes, limit %d", ErrInvalid, len(req.Data), MaxDataLen)
	}
	return nil
}

// maxBatchBytes stops a batch from growing once it holds this much data.
const maxBatchBytes = 8 << 20

// Store is a fenced key-value store backed by one append-only file. It is
// safe for concurrent use.
type Store struct {
	path     string
	f        *os.File
	logger   *slog.Logger
	maxBatch int
	seed     uint32

	queue    chan *pending
	done     chan struct{} // closed when the writer goroutine exits
	closeMu  sync.RWMutex
	closed   bool
	inflight sync.WaitGroup // Write calls between the closed check and the enqueue

	// Owned by the writer goroutine (and Open before it starts).
	highest map[string]uint64
	seq     uint64
	buf     []byte
	sync    func(*os.File) error // test hook

	// Published state: only durable writes.
	mu            sync.RWMutex
	records       map[string]Record
	accepted      uint64
	rejected      uint64
	rejectedByKey map[string]uint64
	repaired      int64
	failed        error // sticky write/fsync failure
}

type pending struct {
	ctx   context.Context
	req   WriteRequest
	res   chan outcome // buffered: the writer never blocks on it
	stale *StaleTokenError
	skip  bool
	out   outcome
}

type outcome struct {
	result WriteResult
	err    error
}

// Write decides req against the highest token of its key and, when it is
// accepted, returns once the write is durable. A stale write returns a
// *StaleTokenError (matching ErrStaleToken); the rejection is logged and
// counted. When ctx ends after the write was queued the write may still be
// applied.
func (s *Store) Write(ctx context.Context, req WriteRequest) (WriteResult, error) {
	if err := req.Validate(); err != nil {
		return WriteResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return WriteResult{}, err
	}
	p := &pending{ctx: ctx, req: req, res: make(chan outcome, 1)}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return WriteResult{}, ErrClosed
	}
	s.inflight.Add(1)
	s.closeMu.RUnlock()
	select {
	case s.queue <- p:
		s.inflight.Done()
	case <-ctx.Done():
		s.inflight.Done()
		return WriteResult{}, ctx.Err()
	}
	select {
	case o := <-p.res:
		return o.result, o.err
	case <-ctx.Done():
		return WriteResult{}, fmt.Errorf("fencedstore: write outcome unknown: %w", ctx.Err())
	}
}

// Read returns the latest accepted (and durable) write of key.
func (s *Store) Read(key string) (Record, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.records[key]
	return r, ok
}

// Stats returns the counters; RejectedByKey is a copy.
func (s *Store) Stats() Stats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	byKey := make(map[string]uint64, len(s.rejectedByKey))
	for k, v := range s.rejectedByKey {
		byKey[k] = v
	}
	return Stats{
		Accepted:      s.accepted,
		Rejected:      s.rejected,
		RejectedByKey: byKey,
		Keys:          len(s.records),
		RepairedBytes: s.repaired,
	}
}

// Err returns the write or fsync failure that stopped the store, if any.
func (s *Store) Err() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.failed
}

// Close answers every queued write, then closes the file. Later writes return
// ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()
	s.inflight.Wait()
	close(s.queue)
	<-s.done
	return s.f.Close()
}

// Open opens (creating it if needed) the data file at path, replays it and
// starts the writer. A torn tail (a last record cut short) is cut off and
// reported in Stats.RepairedBytes; a complete record that fails its
// checksum at the end of the file, or damage followed by a valid record, is
// an error wrapping ErrCorrupt that names the path and the byte offset.
func Open(path string, opts Options) (*Store, error) {
	s := &Store{
		path:          path,
		logger:        opts.Logger,
		maxBatch:      opts.MaxBatch,
		queue:         make(chan *pending, 1024),
		done:          make(chan struct{}),
		highest:       make(map[string]uint64),
		sync:          (*os.File).Sync,
		records:       make(map[string]Record),
		rejectedByKey: make(map[string]uint64),
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.maxBatch <= 0 {
		s.maxBatch = 4096
	}
	f, err := openFile(path)
	if err != nil {
		return nil, err
	}
	s.f = f
	if err := s.load(); err != nil {
		f.Close()
		return nil, fmt.Errorf("fencedstore: open %s: %w", path, err)
	}
	go s.run()
	return s, nil
}

// load replays the file into s and truncates a torn tail.
func (s *Store) load() error {
	fi, err := s.f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	hdr := make([]byte, headerSize)
	if size < headerSize {
		return fmt.Errorf("%w: file is %d bytes, shorter than the %d-byte header", ErrCorrupt, size, headerSize)
	}
	if _, err := s.f.ReadAt(hdr, 0); err != nil {
		return err
	}
	if s.seed, err = parseHeader(hdr); err != nil {
		return err
	}
	end, err := replay(s.f, size, s.seed, s.apply)
	if err != nil {
		return err
	}
	if end < size {
		s.repaired = size - end
		s.logger.Warn("fenced store: cut off a torn tail (a write interrupted by a crash, never acknowledged)",
			"path", s.path, "offset", end, "bytes", s.repaired)
		if err := s.f.Truncate(end); err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("repair: %w", err)
		}
	}
	return nil
}

// apply replays one record.
func (s *Store) apply(off int64, r logRecord) error {
	h, seen := s.highest[r.key]
	switch r.kind {
	case kindAccepted:
		if seen && r.token < h {
			return fmt.Errorf("accepted token %d for key %q is below the earlier %d", r.token, r.key, h)
		}
		s.highest[r.key] = r.token
		s.accepted++
		s.records[r.key] = Record{Key: r.key, Data: r.data, ClientID: r.clientID, Token: FencingToken{Key: r.key, Value: r.token}}
	case kindRejected:
		if !seen || r.token >= h {
			return fmt.Errorf("rejected token %d for key %q was not stale (highest %s)", r.token, r.key, fmtHighest(h, seen))
		}
		s.rejected++
		s.rejectedByKey[r.key]++
	}
	s.seq++
	return nil
}

// isControl matches what kit.ValidateKey refuses in keys: C0 controls
// and DEL.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func fmtHighest(h uint64, seen bool) string {
	if !seen {
		return "none"
	}
	return strconv.FormatUint(h, 10)
}
