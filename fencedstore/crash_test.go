//go:build linux

package fencedstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// helperEnv, when set to a data file path, turns the test binary into a
// store server for TestSIGKILLLosesNoAcknowledgedWrite.
const helperEnv = "FENCEDSTORE_CRASH_HELPER_DATA"

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		crashHelper(path)
	}
	os.Exit(m.Run())
}

// crashHelper serves a store on 127.0.0.1 until it is killed.
func crashHelper(path string) {
	s, err := Open(path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	fmt.Printf("ADDR %s\n", ln.Addr())
	err = http.Serve(ln, NewHandler(s, HandlerOptions{}))
	fmt.Fprintln(os.Stderr, "helper:", err)
	os.Exit(3)
}

// outputWriter captures a child's output and reports its "ADDR" line on
// addr (buffered, sent once).
type outputWriter struct {
	addr chan string
	mu   sync.Mutex
	buf  bytes.Buffer
	sent bool
}

func (w *outputWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for _, line := range strings.Split(w.buf.String(), "\n") {
		if a, ok := strings.CutPrefix(line, "ADDR "); ok && !w.sent && w.addr != nil {
			w.addr <- a
			w.sent = true
		}
	}
	return len(p), nil
}

func (w *outputWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

type attempt struct {
	key, data string
	tok       uint64
}

// TestSIGKILLLosesNoAcknowledgedWrite runs the store in a child process,
// writes to it over HTTP from several goroutines, SIGKILLs it mid-stream and
// checks that the reopened file holds every acknowledged write. (A SIGKILL
// keeps the page cache, so this catches acknowledging before the write
// reaches the kernel; TestWriteWaitsForSync covers the fsync ordering.)
func TestSIGKILLLosesNoAcknowledgedWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	out, stderr := &outputWriter{addr: make(chan string, 1)}, &outputWriter{}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	cmd.Stdout, cmd.Stderr = out, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var reaped atomic.Bool
	t.Cleanup(func() {
		if !reaped.Load() {
			syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()
		}
	})
	var addr string
	select {
	case addr = <-out.addr:
	case <-time.After(20 * time.Second):
		t.Fatalf("child did not print its address; stderr: %s", stderr.String())
	}

	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	c := NewClient("http://"+addr, &http.Client{Transport: tr, Timeout: 10 * time.Second})
	const writers = 8
	keys := []string{"k0", "k1", "k2", "k3"}
	var (
		tokens  atomic.Uint64
		acked   atomic.Int64
		killed  atomic.Bool
		wg      sync.WaitGroup
		acks    [writers][]attempt
		tried   [writers][]attempt
		rejects [writers]int
	)
	for w := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				// Tokens are unique: even ones in order, odd ones 20 steps
				// late, like a paused holder's write (usually stale).
				a := attempt{key: keys[rand.IntN(len(keys))], tok: 2 * tokens.Add(1), data: fmt.Sprintf("w%d-%d", w, i)}
				if i%7 == 3 && a.tok > 41 {
					a.tok -= 41
				}
				tried[w] = append(tried[w], a)
				err := c.Write(context.Background(), WriteRequest{ClientID: fmt.Sprintf("w%d", w), Token: FencingToken{Key: a.key, Value: a.tok}, Data: a.data})
				switch {
				case err == nil:
					acks[w] = append(acks[w], a)
					acked.Add(1)
				case errors.Is(err, ErrStaleToken):
					rejects[w]++
				case killed.Load():
					return
				default:
					t.Errorf("writer %d before the kill: %v", w, err)
					return
				}
			}
		})
	}
	deadline := time.Now().Add(15 * time.Second)
	for acked.Load() < 600 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling the writers' progress
	}
	killed.Store(true)
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	reaped.Store(true)
	wg.Wait()
	if n := acked.Load(); n < 100 {
		t.Fatalf("only %d writes acknowledged before the kill; child stderr: %s", n, stderr.String())
	}

	s := openT(t, path)
	all := map[attempt]bool{}
	maxAck := map[string]attempt{}
	var nAcks, nRejects uint64
	for w := range writers {
		for _, a := range tried[w] {
			all[a] = true
		}
		for _, a := range acks[w] {
			nAcks++
			if m, ok := maxAck[a.key]; !ok || a.tok > m.tok {
				maxAck[a.key] = a
			}
		}
		nRejects += uint64(rejects[w])
	}
	st := s.Stats()
	t.Logf("%d acknowledged writes, %d rejections before SIGKILL; reopened: %+v", nAcks, nRejects, st)
	if st.Accepted < nAcks || st.Rejected < nRejects {
		t.Fatalf("reopened store has %d accepted / %d rejected, but %d / %d were acknowledged", st.Accepted, st.Rejected, nAcks, nRejects)
	}
	for key, m := range maxAck {
		rec, ok := s.Read(key)
		switch {
		case !ok:
			t.Fatalf("key %s lost (acknowledged up to token %d)", key, m.tok)
		case rec.Token.Value < m.tok:
			t.Fatalf("key %s: stored token %d, but token %d was acknowledged", key, rec.Token.Value, m.tok)
		case rec.Token.Value == m.tok && rec.Data != m.data:
			t.Fatalf("key %s: stored %q at token %d, acknowledged %q", key, rec.Data, m.tok, m.data)
		}
		if !all[attempt{key: key, data: rec.Data, tok: rec.Token.Value}] || !strings.HasPrefix(rec.Data, rec.ClientID+"-") {
			t.Fatalf("key %s: stored record %+v was never written", key, rec)
		}
	}
}
