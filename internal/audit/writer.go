package audit

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

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
