package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// The console in Firefox (Debian's firefox-esr), driven over WebDriver
// BiDi — the W3C protocol Firefox speaks natively (it has no DevTools
// protocol for chromedp) — with the few commands the test needs:
// session.new, browsingContext.navigate, script.evaluate.

// firefox is one headless Firefox with a BiDi session.
type firefox struct {
	t       *testing.T
	ws      *websocket.Conn
	context string
	mu      sync.Mutex
	id      int
}

func startFirefox(t *testing.T) *firefox {
	t.Helper()
	if testing.Short() {
		t.Skip("browser test: skipped with -short")
	}
	bin := testenv.RequireBinary(t, "firefox-esr", "firefox-esr")
	profile := t.TempDir()
	// Port 0: Firefox picks a free port and says which on stderr.
	cmd := exec.Command(bin, "--headless", "--no-remote", "--profile", profile, "--remote-debugging-port=0", "about:blank")
	cmd.Env = append(os.Environ(), "HOME="+profile, "MOZ_CRASHREPORTER_DISABLE=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its content processes go with it
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "WebDriver BiDi listening on "); ok {
				addr <- strings.TrimSpace(a)
			}
		}
	}()
	var url string
	select {
	case url = <-addr:
	case <-time.After(60 * time.Second):
		t.Fatal("firefox did not say where WebDriver BiDi listens within 60 s")
	}
	ws, _, err := websocket.DefaultDialer.Dial(url+"/session", nil)
	if err != nil {
		t.Fatalf("BiDi %s: %v", url, err)
	}
	t.Cleanup(func() { ws.Close() })
	f := &firefox{t: t, ws: ws}
	f.call("session.new", map[string]any{"capabilities": map[string]any{}})
	var tree struct{ Contexts []struct{ Context string } }
	json.Unmarshal(f.call("browsingContext.getTree", map[string]any{}), &tree)
	if len(tree.Contexts) == 0 {
		t.Fatal("firefox has no browsing context")
	}
	f.context = tree.Contexts[0].Context
	return f
}

// call sends one BiDi command and returns its result (failing the test on
// an error answer). Events are skipped: the session subscribes to none.
func (f *firefox) call(method string, params any) json.RawMessage {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.id++
	f.ws.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if err := f.ws.WriteJSON(map[string]any{"id": f.id, "method": method, "params": params}); err != nil {
		f.t.Fatalf("BiDi %s: %v", method, err)
	}
	f.ws.SetReadDeadline(time.Now().Add(60 * time.Second))
	for {
		var m struct {
			ID             int
			Type           string
			Result         json.RawMessage
			Error, Message string
		}
		if err := f.ws.ReadJSON(&m); err != nil {
			f.t.Fatalf("BiDi %s: %v", method, err)
		}
		if m.ID != f.id {
			continue
		}
		if m.Type == "error" {
			f.t.Fatalf("BiDi %s: %s: %s", method, m.Error, m.Message)
		}
		return m.Result
	}
}

func (f *firefox) navigate(url string) {
	f.t.Helper()
	f.call("browsingContext.navigate", map[string]any{"context": f.context, "url": url, "wait": "complete"})
}

// eval evaluates expr in the page and returns its value as JSON.
func (f *firefox) eval(expr string) json.RawMessage {
	f.t.Helper()
	var r struct {
		Type   string
		Result struct {
			Type  string
			Value json.RawMessage
		}
		ExceptionDetails struct{ Text string }
	}
	json.Unmarshal(f.call("script.evaluate", map[string]any{"expression": expr, "awaitPromise": true,
		"target": map[string]any{"context": f.context}}), &r)
	if r.Type == "exception" {
		f.t.Fatalf("page: %s: %s", expr, r.ExceptionDetails.Text)
	}
	return r.Result.Value
}

// waitFor polls until expr is true, failing the test after timeout.
func (f *firefox) waitFor(what, expr string, timeout time.Duration) time.Duration {
	f.t.Helper()
	start := time.Now()
	for string(f.eval(expr)) != "true" {
		if time.Since(start) > timeout {
			f.t.Fatalf("firefox: %s: not within %v; status bar: %s", what, timeout, f.eval(`document.querySelector("#status")?.textContent ?? ""`))
		}
		time.Sleep(20 * time.Millisecond) // polling the page's DOM: the test has no event from it
	}
	return time.Since(start)
}

// TestConsoleFirefox: the page works in Firefox too — the cluster with its
// leader, a lock with its token, the event stream live with the grant.
func TestConsoleFirefox(t *testing.T) {
	ff := startFirefox(t)
	bin := testenv.BuildLockgate(t)
	c := testenv.StartRaftlock(t, bin, 3)
	leader := c.Leader()
	if leader == nil {
		t.Fatal("no leader")
	}
	ff.navigate("http://" + c.APIAddrs[0] + "/ui/")
	ff.waitFor("the app shown", `!document.querySelector("#app").hidden`, 20*time.Second)
	ff.waitFor("leader "+leader.ID+" shown", fmt.Sprintf(`document.querySelector("#leader").textContent.trim() === %s`, js(leader.ID)), 20*time.Second)
	ff.waitFor("three nodes listed", `document.querySelectorAll("#nodes tr[data-node]").length === 3`, 10*time.Second)
	ff.waitFor("event stream connected", `document.querySelector("#watch-state").textContent.trim() === "live"`, 20*time.Second)

	key := "console/firefox-" + lock.NewHandle()[:6]
	cl := newClient(t, c.APIAddrs, "erin", "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := cl.Acquire(ctx, key, lock.AcquireOptions{TTL: 30 * time.Second, Value: []byte("ff")})
	if err != nil {
		t.Fatal(err)
	}
	shown := ff.waitFor("the lock's row with its token", fmt.Sprintf(`(() => { const r = document.querySelector(%s); return !!r && r.querySelector(".token")?.textContent.trim() === %s; })()`,
		js(row(key)), js(fmt.Sprint(uint64(l.Token)))), 10*time.Second)
	t.Logf("firefox: lock %s shown %v after its grant", key, shown.Round(time.Millisecond))
	ff.waitFor("the grant in the event stream", fmt.Sprintf(`[...document.querySelectorAll('#events li[data-type="granted"]')].some(li => li.textContent.includes(%s))`, js(key)), 10*time.Second)
	if err := cl.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	ff.waitFor("the release in the event stream", fmt.Sprintf(`[...document.querySelectorAll('#events li[data-type="released"]')].some(li => li.textContent.includes(%s))`, js(key)), 10*time.Second)
}
