package console_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/internal/servers"
	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// The console checked through the page itself, in headless Chromium
// (Debian's chromium, driven over the DevTools protocol by chromedp),
// against `lockgate node` processes: what the page shows is what the
// cluster holds. Every wait polls the page's DOM for a condition, with a
// generous deadline (the CI machine is busy); latencies are logged, not
// asserted (timing goals live in the bench).

// browser starts headless Chromium for t and returns its context.
func browser(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("browser test: skipped with -short")
	}
	chromium := testenv.RequireBinary(t, "chromium", "chromium")
	// A start is tried three times: once in three clean-clone runs beside
	// a second suite, Chromium exited within 0.4 s of its start without
	// saying where DevTools listens — the machine's hiccup, not the
	// console's, and a new profile starts cleanly.
	var errs []error
	for range 3 {
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(chromium),
			chromedp.NoSandbox,
			chromedp.DisableGPU,
			chromedp.UserDataDir(t.TempDir()),
			chromedp.WindowSize(1400, 1000),
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-breakpad", true),
			chromedp.Flag("no-first-run", true),
		)
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
		err := chromedp.Do(ctx) // starts the browser
		if err == nil {
			t.Cleanup(func() { cancel(); cancelAlloc() })
			return ctx
		}
		cancel()
		cancelAlloc()
		t.Logf("starting chromium %s: %v", chromium, err)
		errs = append(errs, err)
	}
	t.Fatalf("chromium %s did not start in 3 tries: %v", chromium, errors.Join(errs...))
	return nil
}

// page is one browser tab on a console.
type page struct {
	t   *testing.T
	ctx context.Context
}

func open(t *testing.T, ctx context.Context, url string) *page {
	t.Helper()
	p := &page{t: t, ctx: ctx}
	p.run("navigate to "+url, chromedp.Navigate(url))
	return p
}

func (p *page) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.shot("failed")
		p.t.Fatalf("%s: %v", what, err)
	}
}

// waitFor polls the page until the JavaScript expression expr is truthy,
// failing the test after timeout, and returns how long it took.
func (p *page) waitFor(what, expr string, timeout time.Duration) time.Duration {
	p.t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(p.ctx, timeout)
	defer cancel()
	ok, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond)))
	if err != nil || !ok {
		sctx, scancel := context.WithTimeout(p.ctx, 5*time.Second)
		defer scancel()
		state, _ := chromedp.Run(sctx, chromedp.Evaluate[string](`document.querySelector("#status")?.textContent ?? ""`))
		p.shot("failed")
		p.t.Fatalf("page: %s: not within %v (%v); status bar: %q", what, timeout, err, state)
	}
	return time.Since(start)
}

// eval evaluates expr (awaiting a promise) into out.
func eval[T any](p *page, what, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		p.shot("failed")
		p.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// text returns the text of the first element matching sel ("" for none).
func (p *page) text(sel string) string {
	p.t.Helper()
	return eval[string](p, "text of "+sel, fmt.Sprintf(`document.querySelector(%q)?.textContent?.trim() ?? ""`, sel))
}

func (p *page) click(sel string) {
	p.t.Helper()
	p.run("click "+sel, chromedp.Click(chromedp.CSS(sel)))
}

// shot saves a screenshot in the test's artifact directory (go test
// -artifacts -outputdir DIR keeps it).
func (p *page) shot(name string) {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(90))
	if err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(p.t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p.t.Logf("screenshot: %s", path)
}

// row is the selector of the lock table's row of key.
func row(key string) string { return fmt.Sprintf(`#locks tr[data-key=%q]`, key) }

// js quotes s as a JavaScript string literal.
func js(s string) string { return fmt.Sprintf("%q", s) }

func newClient(t *testing.T, addrs []string, owner, token string) *client.Client {
	t.Helper()
	c, err := client.New(addrs, client.Options{Token: token, ClientID: owner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestConsoleLive: the page on a follower of a three-node cluster shows the
// leader, a lock with its token, a waiter in the queue, a release in the
// event stream, and the new leader after the old one is killed.
func TestConsoleLive(t *testing.T) {
	ctx := browser(t)
	bin := testenv.BuildLockgate(t)
	c := testenv.StartRaftlock(t, bin, 3)
	leader := c.Leader()
	if leader == nil {
		t.Fatal("no leader")
	}
	var follower *testenv.RaftNode
	for _, nd := range c.Nodes {
		if nd.ID != leader.ID {
			follower = nd
			break
		}
	}
	p := open(t, ctx, "http://"+follower.APIAddr+"/ui")
	p.waitFor("the app shown (open loopback cluster: no login)", `!document.querySelector("#app").hidden && document.querySelector("#login").hidden`, 20*time.Second)

	// The leader shown is the leader.
	p.waitFor("leader "+leader.ID+" shown", fmt.Sprintf(`document.querySelector("#leader").textContent.trim() === %s`, js(leader.ID)), 20*time.Second)
	p.waitFor("three nodes listed", `document.querySelectorAll("#nodes tr[data-node]").length === 3`, 10*time.Second)
	leaderState := eval[string](p, "leader row", fmt.Sprintf(`document.querySelector('#nodes tr[data-node=%s]').dataset.state`, js(leader.ID)))
	if leaderState != "leader" {
		t.Errorf("node %s's row says %q, want leader", leader.ID, leaderState)
	}
	// The event stream is live before anything happens.
	p.waitFor("event stream connected", `document.querySelector("#watch-state").textContent.trim() === "live"`, 20*time.Second)

	// A lock acquired by a client appears with its token.
	key := "console/orders-" + lock.NewHandle()[:6]
	alice := newClient(t, c.APIAddrs, "alice", "")
	actx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := alice.Acquire(actx, key, lock.AcquireOptions{TTL: 30 * time.Second, Value: []byte("host-a")})
	if err != nil {
		t.Fatal(err)
	}
	shown := p.waitFor("the lock's row with its token", fmt.Sprintf(`(() => { const r = document.querySelector(%s); return !!r && r.querySelector(".token")?.textContent.trim() === %s && r.querySelector(".owner")?.textContent.includes("alice"); })()`,
		js(row(key)), js(fmt.Sprint(uint64(l.Token)))), 10*time.Second)
	t.Logf("lock %s (token %d) shown %v after its grant was answered", key, l.Token, shown.Round(time.Millisecond))
	if v := p.text(row(key) + " .value"); v != "host-a" {
		t.Errorf("value shown %q, want host-a", v)
	}
	p.waitFor("the grant in the event stream", fmt.Sprintf(`[...document.querySelectorAll('#events li[data-type="granted"]')].some(li => li.textContent.includes(%s))`, js(key)), 10*time.Second)

	// A waiter appears in the key's queue.
	bob := newClient(t, c.APIAddrs, "bob", "")
	bobGot := make(chan error, 1)
	go func() {
		bl, err := bob.Acquire(actx, key, lock.AcquireOptions{TTL: 30 * time.Second})
		if err == nil {
			err = bob.Release(context.Background(), bl)
		}
		bobGot <- err
	}()
	p.click(row(key))
	p.waitFor("the detail of "+key, fmt.Sprintf(`document.querySelector("#lock-detail").dataset.key === %s && !document.querySelector("#lock-detail").hidden`, js(key)), 10*time.Second)
	p.waitFor("bob in the queue", `[...document.querySelectorAll("#queue li")].some(li => li.textContent.includes("bob"))`, 15*time.Second)
	p.waitFor("the row counts one waiter", fmt.Sprintf(`document.querySelector(%s)?.querySelector(".waiters")?.textContent.trim() === "1"`, js(row(key))), 10*time.Second)
	p.shot("waiter")

	// A release shows in the event stream (and bob gets the key).
	if err := alice.Release(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the release in the event stream", fmt.Sprintf(`[...document.querySelectorAll('#events li[data-type="released"]')].some(li => li.textContent.includes(%s))`, js(key)), 10*time.Second)
	if err := <-bobGot; err != nil {
		t.Fatalf("bob: %v", err)
	}

	// The pause button holds events back, and resuming shows them. The
	// detail is closed first: above the events, its refreshes move the
	// button between a click's aim and its landing.
	p.click("#close-detail")
	p.waitFor("the detail closed", `document.querySelector("#lock-detail").hidden`, 10*time.Second)
	p.click("#pause")
	before := eval[int](p, "events before", `document.querySelectorAll("#events li").length`)
	key2 := key + "-paused"
	l2, err := alice.Acquire(actx, key2, lock.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p.waitFor("the paused event counted on the button", `/\d+ new/.test(document.querySelector("#pause").textContent)`, 10*time.Second)
	during := eval[int](p, "events while paused", `document.querySelectorAll("#events li").length`)
	if during != before {
		t.Errorf("paused, yet the list went from %d to %d events", before, during)
	}
	p.click("#pause")
	p.waitFor("the held-back grant shown on resume", fmt.Sprintf(`[...document.querySelectorAll('#events li[data-type="granted"]')].some(li => li.textContent.includes(%s))`, js(key2)), 10*time.Second)
	alice.Release(context.Background(), l2)
	p.shot("live")

	// The sparklines on this follower show the cluster's figures, the
	// leader's, labelled with it, while a client takes locks in a loop.
	load := newClient(t, c.APIAddrs, "load", "")
	lctx, stopLoad := context.WithCancel(context.Background())
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		for lctx.Err() == nil {
			if ll, err := load.Acquire(lctx, key+"-load", lock.AcquireOptions{TTL: 10 * time.Second}); err == nil {
				load.Release(context.Background(), ll)
			}
		}
	}()
	p.waitFor("the leader's grants/s and commit latency on the follower's sparklines", fmt.Sprintf(`document.querySelector("#metrics-source").textContent.trim() === %s &&
		parseFloat(document.querySelector("#spark-grants-value").textContent) > 0 &&
		parseFloat(document.querySelector("#spark-commit-value").textContent) > 0`, js("from node "+leader.ID+" (leader)")), 20*time.Second)
	t.Logf("follower %s's sparklines: %s grants, %s commit latency, %s", follower.ID, p.text("#spark-grants-value"), p.text("#spark-commit-value"), p.text("#metrics-source"))
	if local := p.text("#metrics-local"); !strings.HasPrefix(local, "Local, node "+follower.ID+" (follower)") {
		t.Errorf("the local figures are labelled %q, want the follower's own", local)
	}
	p.shot("figures")
	stopLoad()
	<-loaded

	// Killing the leader changes the leader shown.
	leader.Kill()
	p.waitFor("a new leader shown", fmt.Sprintf(`(() => { const s = document.querySelector("#leader").textContent.trim(); return s !== %s && /^[0-9]+$/.test(s); })()`, js(leader.ID)), 60*time.Second)
	p.waitFor("the leader change in the event stream", `document.querySelector('#events li[data-type="leader"]') !== null`, 10*time.Second)
	now := c.Leader()
	if now == nil {
		t.Fatal("no leader after the kill")
	}
	p.waitFor("the leader shown is the new leader", fmt.Sprintf(`document.querySelector("#leader").textContent.trim() === %s`, js(now.ID)), 20*time.Second)
	// (The new leader may be this follower: its label then adds "this node".)
	p.waitFor("the figures from the new leader", fmt.Sprintf(`(() => { const e = document.querySelector("#metrics-source"); return e.dataset.node === %s && e.textContent.trim().startsWith(%s); })()`,
		js(now.ID), js("from node "+now.ID+" (leader")), 20*time.Second)
	p.shot("failover")
}

// TestConsoleSecured: on a node that checks tokens, the page shows a login
// and no data without one; a client token shows the data but cannot
// force-release (no button, and the endpoint refuses it); an admin token
// force-releases through the confirmation.
func TestConsoleSecured(t *testing.T) {
	ctx := browser(t)
	bin := testenv.BuildLockgate(t)
	dir := t.TempDir()
	clientTok, adminTok := "client-"+lock.NewHandle(), "admin-"+lock.NewHandle()
	tokens, admins := filepath.Join(dir, "tokens"), filepath.Join(dir, "admin-tokens")
	if err := errors.Join(os.WriteFile(tokens, []byte(clientTok+"\n"), 0o600), os.WriteFile(admins, []byte(adminTok+"\n"), 0o600)); err != nil {
		t.Fatal(err)
	}
	c := testenv.StartRaftlockWith(t, bin, 3, testenv.RaftlockOptions{Args: func(int, []*servers.RaftNode) []string {
		return []string{"--auth-tokens-file", tokens, "--admin-tokens-file", admins}
	}})
	key := "console/secured-" + lock.NewHandle()[:6]
	holder := newClient(t, c.APIAddrs, "carol", clientTok)
	actx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := holder.Acquire(actx, key, lock.AcquireOptions{TTL: 60 * time.Second, Value: []byte("secret-value")})
	if err != nil {
		t.Fatal(err)
	}

	url := "http://" + c.APIAddrs[0] + "/ui/"
	p := open(t, ctx, url)
	// Without credentials: the login form, and no data.
	p.waitFor("the login form", `!document.querySelector("#login").hidden && document.querySelector("#app").hidden`, 20*time.Second)
	html := eval[string](p, "the page's text", `document.body.innerText`)
	if strings.Contains(html, key) || strings.Contains(html, "secret-value") || strings.Contains(html, "carol") {
		t.Errorf("the page shows lock data without a credential:\n%s", html)
	}
	p.shot("login")
	// A wrong token is refused on the form.
	p.run("a wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "not-a-token-"+lock.NewHandle()), chromedp.Click(chromedp.CSS("#login-submit")))
	p.waitFor("the login refused", `!document.querySelector("#login-error").hidden && document.querySelector("#app").hidden`, 10*time.Second)

	// A client token: the data, but no force-release.
	login(p, clientTok)
	p.waitFor("the lock shown to a client token", fmt.Sprintf(`document.querySelector(%s) !== null`, js(row(key))), 15*time.Second)
	p.click(row(key))
	p.waitFor("the detail", fmt.Sprintf(`document.querySelector("#lock-detail").dataset.key === %s`, js(key)), 10*time.Second)
	hasButton := eval[bool](p, "force-release button", `(() => { const b = document.querySelector("#force-release"); return !!b && b.offsetParent !== null; })()`)
	if hasButton {
		t.Error("a client token is offered force-release")
	}
	// The endpoint itself refuses the client token, from the page.
	status := eval[int](p, "force-release with a client token", fmt.Sprintf(`fetch("/v1/console/force-release", {method: "POST", headers: {"Content-Type": "application/json", "Authorization": "Bearer " + %s}, body: JSON.stringify({key: %s})}).then(r => r.status)`,
		js(clientTok), js(key)))
	if status != 403 {
		t.Errorf("force-release with a client token answered %d, want 403", status)
	}
	if info, err := holder.Inspect(actx, key); err != nil || info.Token != l.Token {
		t.Fatalf("after the refused force-release: inspect %+v, %v; want carol's token %d", info, err, l.Token)
	}

	// An admin token: force-release through the confirmation.
	p = open(t, ctx, url) // a reload forgets the token
	p.waitFor("the login form after a reload", `!document.querySelector("#login").hidden`, 20*time.Second)
	login(p, adminTok)
	// The event stream runs on the admin token, sent as the subprotocol.
	p.waitFor("the event stream live on the admin token", `document.querySelector("#watch-state").textContent.trim() === "live"`, 20*time.Second)
	p.waitFor("the lock shown to the admin", fmt.Sprintf(`document.querySelector(%s) !== null`, js(row(key))), 15*time.Second)
	p.click(row(key))
	p.waitFor("the admin's force-release button", `(() => { const b = document.querySelector("#force-release"); return !!b && b.offsetParent !== null; })()`, 10*time.Second)
	// The detail loaded (its holders shown), so that the button no longer
	// moves: a click computed before the holders' rows pushed it down
	// missed it (one run in two, after TestConsoleLive).
	p.waitFor("the detail's holder", `[...document.querySelectorAll("#detail-holders tbody tr")].some(tr => tr.textContent.includes("carol"))`, 10*time.Second)
	p.click("#force-release")
	p.waitFor("the confirmation", `(() => { const b = document.querySelector("#confirm-force"); return !!b && b.offsetParent !== null; })()`, 10*time.Second)
	p.shot("confirm")
	if info, err := holder.Inspect(actx, key); err != nil || info.Token != l.Token {
		t.Fatalf("before confirming: inspect %+v, %v; want the lock still held", info, err)
	}
	p.click("#confirm-force")
	p.waitFor("the release reported", `/released/i.test(document.querySelector("#action-result").textContent)`, 15*time.Second)
	if _, err := holder.Inspect(actx, key); !errors.Is(err, lock.ErrNotFound) {
		t.Errorf("after the force-release: inspect err %v, want ErrNotFound", err)
	}
	// The key is free for the next client at once (carol learns of the
	// release at her next renewal; her token is fenced meanwhile).
	dave := newClient(t, c.APIAddrs, "dave", clientTok)
	if l2, err := dave.TryAcquire(actx, key, lock.AcquireOptions{TTL: 10 * time.Second}); err != nil || l2.Token <= l.Token {
		t.Errorf("after the force-release: dave's try-acquire %v, %v; want a grant with a token above %d", l2, err, l.Token)
	}
	p.shot("force-released")
}

func login(p *page, token string) {
	p.t.Helper()
	eval[bool](p, "clear the token field", `(document.querySelector("#token").value = "") === ""`)
	p.run("log in", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#login-submit")))
	p.waitFor("the app after logging in", `!document.querySelector("#app").hidden && document.querySelector("#login").hidden`, 15*time.Second)
}
