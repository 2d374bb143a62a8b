package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// Subprotocol is protocol v1's WebSocket subprotocol: a client that
// offers it (browsers must offer one the server selects, when they offer
// any) gets it selected.
const Subprotocol = "lockgate.v1"

// newUpgrader is the gateway's upgrader: the v1 subprotocol and the
// Origin policy of Options.AllowedOrigins.
func (g *Gateway) newUpgrader() *websocket.Upgrader {
	return &websocket.Upgrader{
		ReadBufferSize:  1024,
		WriteBufferSize: 1024,
		WriteBufferPool: &sync.Pool{},
		Subprotocols:    []string{Subprotocol},
		CheckOrigin:     g.originAllowed,
	}
}

// maxKeptWriteBuffer bounds the encoding buffer a connection keeps between
// messages.
const maxKeptWriteBuffer = 4 << 10

// conn is one WebSocket client: its waits, its leases, its writer.
type conn struct {
	g        *Gateway
	ws       *websocket.Conn
	ctx      context.Context // ends when the connection does
	cancel   context.CancelFunc
	clientID string

	// Writes are made by whichever goroutine has something to say, under
	// writeMu, bounded by the write deadline; pings come from a timer. No
	// writer goroutine: an idle connection costs one goroutine (its reader).
	writeMu sync.Mutex
	ping    *time.Timer
	wbuf    []byte // the message being written, under writeMu

	// slots bounds the frames in flight (Options.MaxInFlightPerConn): a
	// frame's call takes a slot before it starts and gives it back when it
	// has answered. Waiting acquires do not take one (MaxWaitersPerConn
	// bounds them), so that a connection's waits never starve its renews.
	slots chan struct{}

	mu     sync.Mutex
	waits  map[string]waitRef // by wire.Request id
	nwaits int
	// leases holds the connection's live leases by lock token. A lease
	// leaves it when it ends (AfterEnd: released, expired, refused), so
	// that a grant costs O(1) whatever the connection holds, and its size
	// is what the connection holds. An entry is the Lease itself (no
	// wrapper: the scale bench counts the gateway's bytes per held lease).
	leases map[string]*lock.Lease
	// rod holds the lock tokens of the leases to release when the
	// connection drops (releaseOnDisconnect); nil until one asks.
	rod map[string]struct{}
	// acquiring counts acquires started and not yet answered; with leases
	// it is bounded by Options.MaxLocksPerConn.
	acquiring int
	// watches are the open watches by id (Options.MaxWatchesPerConn);
	// nil once the connection has ended.
	watches map[string]*watch
	// sessions are the sessions the connection opened and has not closed
	// (Options.MaxSessionsPerConn; ended ones leave at the next open),
	// openingSessions those being opened. nil once the connection has
	// ended: its sessions live on until their TTL.
	sessions        map[string]*lock.Session
	openingSessions int
}

func (g *Gateway) serveWS(w http.ResponseWriter, r *http.Request) {
	ws, err := g.upgrader.Upgrade(w, r, g.announce().upgradeHeader)
	if err != nil {
		return // the upgrader has answered with an HTTP error
	}
	caller := CallerOf(r.Context())
	caller.rated = true // the reader takes the rate (handle)
	ctx, cancel := context.WithCancel(withCaller(context.Background(), caller))
	c := g.newConn(ws, ctx, cancel)
	if !g.track(c) {
		ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "gateway closing"), time.Now().Add(time.Second))
		ws.Close()
		cancel()
		return
	}
	g.metrics.connections.Inc()
	c.ping = time.AfterFunc(g.opts.PingInterval, c.sendPing)
	// The reader runs on a goroutine of its own and the handler returns:
	// net/http's connection goroutine (its stack, grown by the request's
	// handling, and the request's buffers it keeps while the handler runs)
	// ends with the upgrade instead of living as long as the connection.
	// An idle connection then costs a small stack, not the handler's.
	go func() {
		c.reader()
		c.finish()
	}()
}

// newConn makes the state of one connection; ws is nil for the fuzz
// target's connection-less handler.
func (g *Gateway) newConn(ws *websocket.Conn, ctx context.Context, cancel context.CancelFunc) *conn {
	return &conn{
		g: g, ws: ws, ctx: ctx, cancel: cancel,
		clientID: "ws-" + lock.NewHandle()[:12],
		slots:    make(chan struct{}, g.opts.MaxInFlightPerConn),
		waits:    map[string]waitRef{},
		leases:   map[string]*lock.Lease{},
		watches:  map[string]*watch{},
		sessions: map[string]*lock.Session{},
	}
}

// reader handles frames until the connection fails or goes idle.
func (c *conn) reader() {
	o := c.g.opts
	c.ws.SetReadDeadline(time.Now().Add(o.IdleTimeout))
	c.ws.SetPongHandler(func(string) error {
		return c.ws.SetReadDeadline(time.Now().Add(o.IdleTimeout))
	})
	for {
		typ, data, err := c.readFrame()
		if err != nil {
			c.readFailed(err)
			return
		}
		if typ != websocket.TextMessage {
			c.fail("", newError(wire.CodeBadJSON, "binary frames are not part of the protocol; send JSON text frames"))
		} else if !c.handle(data) {
			return
		}
		// The idle deadline runs from when the reader is ready for the
		// next frame: time spent waiting for an in-flight slot
		// (back-pressure) is the gateway's, not the client's idleness.
		c.ws.SetReadDeadline(time.Now().Add(o.IdleTimeout))
	}
}

// handle decodes one frame and runs its command. Bad input gets an error
// reply and the connection stays usable, except for a frame that is not
// UTF-8: handle then closes the connection with 1007 and reports false.
func (c *conn) handle(data []byte) bool {
	// RFC 6455 §8.1: an endpoint that finds a text frame is not UTF-8 must
	// fail the connection. Decoding it instead would turn each invalid
	// byte into U+FFFD, making "a\xff" and "a\xfe" one lock.
	if !utf8.Valid(data) {
		c.g.metrics.errors.WithLabelValues("invalid_utf8").Inc()
		c.closeWith(websocket.CloseInvalidFramePayloadData, "text frames must be valid UTF-8")
		return false
	}
	if aerr := checkObject(data); aerr != nil {
		c.fail(idOf(data), aerr)
		return true
	}
	var req wire.Request
	if err := wire.DecodeRequestStrict(data, &req); err != nil {
		c.fail(idOf(data), newError(wire.CodeBadJSON, "malformed request: "+err.Error()))
		return true
	}
	if len(req.ID) > wire.MaxIDLen {
		c.fail(req.ID, newError(wire.CodeBadJSON, fmt.Sprintf("id is %d bytes, the maximum is %d", len(req.ID), wire.MaxIDLen)))
		return true
	}
	needsKey := req.CommandType >= wire.CmdAcquire && req.CommandType <= wire.CmdTryAcquire || req.CommandType == wire.CmdWatch && !req.Prefix
	if req.Key == "" && needsKey && !hasKey(data) {
		c.fail(req.ID, newError(wire.CodeMissingField, "key is required"))
		return true
	}
	if aerr := misplacedFields(req); aerr != nil {
		c.fail(req.ID, aerr)
		return true
	}
	if rated(req.CommandType) {
		if err := c.g.tenants.rate(CallerOf(c.ctx).Identity); err != nil {
			c.fail(req.ID, toAPIError(err))
			var re *RateError
			if errors.As(err, &re) {
				throttle(c.ctx, re.RetryIn) // the connection's next frame waits: back-pressure
			}
			return true
		}
	}
	switch req.CommandType {
	case wire.CmdAcquire, wire.CmdTryAcquire:
		c.acquire(req)
	case wire.CmdRelease:
		c.release(req)
	case wire.CmdRenew:
		c.renew(req)
	case wire.CmdInspect:
		c.inspect(req)
	case wire.CmdCancel:
		c.cancelWait(req)
	case wire.CmdAcquireAll, wire.CmdTryAcquireAll:
		c.acquireAll(req)
	case wire.CmdWatch:
		c.watch(req)
	case wire.CmdUnwatch:
		c.unwatch(req)
	case wire.CmdOpenSession:
		c.openSessionWS(req)
	case wire.CmdRenewSession:
		c.renewSessionWS(req)
	case wire.CmdCloseSession:
		c.closeSessionWS(req)
	case 0:
		c.fail(req.ID, newError(wire.CodeUnknownCommand, "commandType is missing: "+commandList))
	default:
		c.fail(req.ID, newError(wire.CodeUnknownCommand, fmt.Sprintf("commandType %d is unknown: %s", req.CommandType, commandList)))
	}
	return true
}

// takeSlot waits for one of the connection's in-flight slots, holding up
// the reader meanwhile (back-pressure: the client's frames wait in TCP
// buffers, not in goroutines). It reports false once the connection ended.
// The call that took the slot gives it back with giveSlot.
func (c *conn) takeSlot() bool {
	select {
	case c.slots <- struct{}{}:
		return true
	default:
	}
	if c.g.slotWait != nil {
		c.g.slotWait()
	}
	select {
	case c.slots <- struct{}{}:
		return true
	case <-c.ctx.Done():
		return false
	}
}

func (c *conn) giveSlot() { <-c.slots }

// commandList names the commands in unknown_command's message.
const commandList = "1 acquire, 2 release, 3 renew, 4 inspect, 5 try-acquire, 6 cancel, 7 acquireAll, 8 tryAcquireAll, 9 watch, 10 unwatch, 11 openSession, 12 renewSession, 13 closeSession"

// reserveLock counts an acquire of n keys against
// Options.MaxLocksPerConn; granted gives the reservation back (or turns it
// into held leases).
func (c *conn) reserveLock(n int) *apiError {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.leases)+c.acquiring+n > c.g.opts.MaxLocksPerConn {
		return newError(wire.CodeTooManyLocks,
			fmt.Sprintf("this connection holds or is acquiring %d locks, the maximum (release some first)", c.g.opts.MaxLocksPerConn))
	}
	c.acquiring += n
	return nil
}

func (c *conn) acquire(req wire.Request) {
	if req.Key == "" {
		c.fail(req.ID, newError(wire.CodeInvalidKey, "key is empty"))
		return
	}
	opts := c.acquireOptions(req)
	if req.Mode != "" || req.Permits != 0 || req.LockDelayMS != 0 {
		// The primitives' options: refused when malformed, or unsupported by
		// the backend, before it sees them. A plain acquire skips this.
		if aerr := c.g.primitiveOptions(&opts, req.Key, req.Mode, req.Permits, req.LockDelayMS, 0); aerr != nil {
			c.fail(req.ID, aerr)
			return
		}
	}
	if req.SessionID != "" {
		if aerr := c.g.sessionOptions(&opts, req.SessionID, req.TTL, req.ClientID); aerr != nil {
			c.fail(req.ID, aerr)
			return
		}
	}
	try := req.CommandType == wire.CmdTryAcquire
	acquire := c.g.tl.Acquire
	if try {
		acquire = c.g.tl.TryAcquire
	}
	c.launch(req, 1, try, func(ctx context.Context, outcome func(error) error) {
		start := time.Now()
		opts := opts
		var lease *lock.Lease
		err := c.g.sessionAcquire(ctx, req.SessionID, req.Key, &opts)
		if err == nil {
			lease, err = acquire(ctx, req.Key, opts)
		}
		c.granted(req, start, lease, outcome(err))
	})
}

// acquireOptions are the acquire options req names, but for the primitives'
// (mode, permits, lockDelayMs: primitiveOptions checks them); without a
// clientId the owner is the connection's client.
func (c *conn) acquireOptions(req wire.Request) lock.AcquireOptions {
	opts := lock.AcquireOptions{TTL: ttlOption(req.TTL), Owner: req.ClientID, Handle: req.LockToken}
	if opts.Owner == "" {
		opts.Owner = c.clientID
	}
	if req.Value != nil {
		opts.Value = []byte(*req.Value)
	}
	return opts
}

// launch admits an acquire of n keys for req and runs it on a worker: a
// try (one attempt) once it has a call slot and its locks are reserved,
// under the connection's context; a wait through beginWait, under the
// wait's context. run makes the attempt and reports it, passing its error
// through outcome (endWait's for a wait, as it is for a try).
func (c *conn) launch(req wire.Request, n int, try bool, run func(ctx context.Context, outcome func(error) error)) {
	if try {
		if !c.takeSlot() {
			return
		}
		if aerr := c.reserveLock(n); aerr != nil {
			c.giveSlot()
			c.fail(req.ID, aerr)
			return
		}
		c.g.workers.Go(func() {
			defer c.giveSlot()
			run(c.ctx, func(err error) error { return err })
		})
		return
	}
	ctx, cancel, aerr := c.beginWait(req, n)
	if aerr != nil {
		c.fail(req.ID, aerr)
		return
	}
	c.g.workers.Go(func() {
		defer cancel(nil)
		run(ctx, func(err error) error { return c.endWait(req, ctx, err) })
	})
}

// beginWait admits a waiting acquire of n keys (1, or an acquireAll's):
// it checks waitMs and the connection's limits, counts the wait and its
// locks, and makes the wait cancellable by its id. The caller runs the
// wait under ctx, then endWait, and cancel(nil) when done.
func (c *conn) beginWait(req wire.Request, n int) (context.Context, context.CancelCauseFunc, *apiError) {
	if maxMS := durationMS(c.g.opts.MaxWait); req.WaitMS < 0 || req.WaitMS > maxMS {
		return nil, nil, newError(wire.CodeInvalidWait, fmt.Sprintf("waitMs is %d; it must be 0 (no bound) to %d", req.WaitMS, maxMS))
	}
	ctx, cancel := context.WithCancelCause(c.ctx)
	if req.WaitMS > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, time.Duration(req.WaitMS)*time.Millisecond, errWaitTimedOut)
		cancelCause := cancel
		cancel = func(cause error) { stop(); cancelCause(cause) }
	}
	c.mu.Lock()
	if c.nwaits >= c.g.opts.MaxWaitersPerConn {
		c.mu.Unlock()
		cancel(nil)
		return nil, nil, newError(wire.CodeTooManyWaiters,
			fmt.Sprintf("this connection already waits for %d acquires", c.g.opts.MaxWaitersPerConn))
	}
	if len(c.leases)+c.acquiring+n > c.g.opts.MaxLocksPerConn {
		c.mu.Unlock()
		cancel(nil)
		return nil, nil, newError(wire.CodeTooManyLocks,
			fmt.Sprintf("this connection holds or is acquiring %d locks, the maximum (release some first)", c.g.opts.MaxLocksPerConn))
	}
	c.acquiring += n
	c.nwaits++
	if req.ID != "" {
		key := req.Key
		if key == "" && len(req.Keys) > 0 {
			key = req.Keys[0]
		}
		c.waits[req.ID] = waitRef{key: key, cancel: func() { cancel(errCancelledByClient) }}
	}
	c.mu.Unlock()
	c.g.metrics.waiters.Inc()
	return ctx, cancel, nil
}

// endWait ends the count of a wait begun by beginWait and turns a wait
// that ended by the client's cancel or by waitMs into the error that says
// so.
func (c *conn) endWait(req wire.Request, ctx context.Context, err error) error {
	c.mu.Lock()
	c.nwaits--
	if req.ID != "" {
		delete(c.waits, req.ID)
	}
	c.mu.Unlock()
	c.g.metrics.waiters.Dec()
	switch cause := context.Cause(ctx); {
	case err == nil:
	case errors.Is(cause, errCancelledByClient):
		err = fmt.Errorf("%w: %w", errCancelledByClient, context.Canceled)
	case errors.Is(cause, errWaitTimedOut):
		what := fmt.Sprintf("%q", req.Key)
		if req.Key == "" {
			what = fmt.Sprintf("%q", req.Keys)
		}
		err = fmt.Errorf("%w: waited %d ms (waitMs) for %s", errWaitTimedOut, req.WaitMS, what)
	}
	return err
}

var errCancelledByClient = errors.New("the client cancelled the wait")

// errWaitTimedOut: an acquire's waitMs ran out (answered timeout).
var errWaitTimedOut = errors.New("the wait timed out")

// waitRef is a waiting acquire of the connection: its key, and how to
// cancel it.
type waitRef struct {
	key    string
	cancel func()
}

// granted reports an acquire's outcome (its reserveLock turns into a held
// lease or ends); a grant that arrives after the connection ended is kept
// (or released, if asked) like any other lease.
func (c *conn) granted(req wire.Request, start time.Time, lease *lock.Lease, err error) {
	if err != nil {
		c.mu.Lock()
		c.acquiring--
		c.mu.Unlock()
		c.fail(req.ID, toAPIError(err))
		return
	}
	c.g.metrics.acquireWS.Observe(time.Since(start).Seconds())
	c.g.metrics.grants.Inc()
	if !c.hold(req, lease) {
		return
	}
	// A lease handed over while others wait says so in its grant: no push
	// could reach the holder before it takes the lease for unwanted.
	wanted := c.g.wanted && lease.IsWanted()
	c.send(wire.Reply{ID: req.ID, Type: wire.TypeGrant, Success: true, Key: lease.Key,
		FencingToken: &wire.FencingToken{Key: lease.Key, Value: uint64(lease.Token)},
		LockToken:    lease.Handle, TTL: durationMS(lease.TTL()), Owner: lease.Owner, Wanted: wanted,
		Mode: modeName(lease.Mode), Permits: lease.Permits, SessionID: sessionIDOf(lease)})
	if !wanted {
		c.tellWanted(lease) // after the grant: a client learns of a lease before it hears it is wanted
	}
}

// hold turns one reserved lock of an acquire into a held lease of the
// connection. It reports false when the connection has ended meanwhile:
// then the lease is kept (or released, if asked) like any other, untold.
func (c *conn) hold(req wire.Request, lease *lock.Lease) bool {
	c.mu.Lock()
	c.acquiring--
	gone := c.ctx.Err() != nil
	if !gone {
		c.leases[lease.Handle] = lease
		if req.ReleaseOnDisconnect {
			if c.rod == nil {
				c.rod = map[string]struct{}{}
			}
			c.rod[lease.Handle] = struct{}{}
		}
	}
	c.mu.Unlock()
	if gone {
		if req.ReleaseOnDisconnect {
			c.releaseQuietly(lease)
		}
		return false
	}
	// Outside mu: AfterEnd calls dropEnded at once if the lease has ended
	// already.
	lease.AfterEnd(func() { c.dropEnded(lease) })
	return true
}

// leaseFor rebuilds the lease a release or renew names.
func (c *conn) leaseFor(req wire.Request) (*lock.Lease, *apiError) {
	switch {
	case req.Key == "":
		return nil, newError(wire.CodeInvalidKey, "key is empty")
	case req.LockToken == "":
		return nil, newError(wire.CodeMissingField, "lockToken is required")
	case req.FencingToken == nil:
		return nil, newError(wire.CodeMissingField, "fencingToken is required")
	}
	if aerr := validateLeaseRef(req.Key, req.LockToken); aerr != nil {
		return nil, aerr
	}
	if k := req.FencingToken.Key; k != "" && k != req.Key {
		return nil, newError(wire.CodeBadJSON, fmt.Sprintf("fencingToken.key %q is not the request's key %q", k, req.Key))
	}
	ttl := lock.DefaultTTL
	c.mu.Lock()
	if h := c.leases[req.LockToken]; h != nil {
		ttl = h.TTL()
	}
	c.mu.Unlock()
	return rebuild(req.Key, req.LockToken, req.FencingToken.Value, ttl), nil
}

// heldFor returns the lease this connection was granted that a release
// names (same lock token, key and fencing token), or nil. Releasing that
// Lease rather than a rebuilt copy ends it, so that what the backend keeps
// until a lease ends (its deadline timer, callbacks on its end) goes at
// once, and it spares a copy. The backend checks the lock token and the
// fencing token as it does for a rebuilt copy: finding the lease here
// grants nothing.
func (c *conn) heldFor(req wire.Request) *lock.Lease {
	if req.Key == "" || req.LockToken == "" || req.FencingToken == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.leases[req.LockToken]
	if h == nil || h.Key != req.Key || uint64(h.Token) != req.FencingToken.Value {
		return nil
	}
	return h
}

func (c *conn) release(req wire.Request) {
	lease := c.heldFor(req)
	if lease == nil {
		var aerr *apiError
		if lease, aerr = c.leaseFor(req); aerr != nil {
			c.fail(req.ID, aerr)
			return
		}
	}
	if !c.takeSlot() {
		return
	}
	c.g.workers.Go(func() {
		defer c.giveSlot()
		ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
		defer cancel()
		err := c.g.tl.Release(ctx, lease)
		c.forget(req.LockToken)
		switch {
		case err != nil:
			c.fail(req.ID, toAPIError(err))
		case req.Ack:
			c.send(wire.Reply{ID: req.ID, Type: wire.TypeReleased, Success: true, Key: req.Key})
		}
	})
}

func (c *conn) renew(req wire.Request) {
	lease, rebuilt := c.heldFor(req), false
	if lease == nil || lease.Err() != nil {
		var aerr *apiError
		if lease, aerr = c.leaseFor(req); aerr != nil {
			c.fail(req.ID, aerr)
			return
		}
		rebuilt = true
	}
	ttl := lease.TTL()
	if req.TTL != 0 {
		ttl = ttlOption(req.TTL)
	}
	if !c.takeSlot() {
		return
	}
	c.g.workers.Go(func() {
		defer c.giveSlot()
		ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
		defer cancel()
		if err := c.g.tl.Renew(ctx, lease, ttl); err != nil {
			c.fail(req.ID, toAPIError(err))
			return
		}
		c.g.metrics.leaseRenews.Inc()
		if rebuilt {
			c.adopt(req.LockToken, lease)
		}
		c.send(wire.Reply{ID: req.ID, Type: wire.TypeRenewed, Success: true, Key: req.Key,
			FencingToken: &wire.FencingToken{Key: req.Key, Value: req.FencingToken.Value}, TTL: durationMS(ttl)})
	})
}

func (c *conn) inspect(req wire.Request) {
	if req.Key == "" {
		c.fail(req.ID, newError(wire.CodeInvalidKey, "key is empty"))
		return
	}
	if err := lock.ValidateKey(req.Key); err != nil {
		c.fail(req.ID, toAPIError(err))
		return
	}
	if !c.takeSlot() {
		return
	}
	c.g.workers.Go(func() {
		defer c.giveSlot()
		ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
		defer cancel()
		info, err := c.g.tl.Inspect(ctx, req.Key)
		if err != nil {
			c.fail(req.ID, toAPIError(err))
			return
		}
		c.send(infoReply(req.ID, info))
	})
}

func infoReply(id string, info *lock.LockInfo) wire.Reply {
	r := wire.Reply{ID: id, Type: wire.TypeInfo, Success: true, Key: info.Key, Owner: info.Owner,
		FencingToken: &wire.FencingToken{Key: info.Key, Value: uint64(info.Token)}, Waiters: &info.Waiters,
		Mode: modeName(info.Mode), Permits: info.Permits, Value: wireValue(info.Value), ExpiresIn: expiresIn(info.Expires)}
	for _, h := range info.Holders {
		r.Holders = append(r.Holders, wire.HolderInfo{
			Owner:        h.Owner,
			FencingToken: &wire.FencingToken{Key: info.Key, Value: uint64(h.Token)},
			Value:        wireValue(h.Value),
			ExpiresIn:    expiresIn(h.Expires),
		})
	}
	return r
}

// wireValue is a lock's value in a message: absent (nil) when it has none.
func wireValue(v []byte) *string {
	if v == nil {
		return nil
	}
	s := string(v)
	return &s
}

// expiresIn is the ms left until expires, never negative: absent (nil)
// when expires is zero (no expiry known).
func expiresIn(expires time.Time) *int64 {
	if expires.IsZero() {
		return nil
	}
	ms := max(durationMS(time.Until(expires)), 0)
	return &ms
}

func (c *conn) cancelWait(req wire.Request) {
	if req.Target == "" {
		c.fail(req.ID, newError(wire.CodeMissingField, "target (the id of the acquire to cancel) is required"))
		return
	}
	c.mu.Lock()
	ref, ok := c.waits[req.Target]
	c.mu.Unlock()
	if !ok {
		c.fail(req.ID, newError(wire.CodeNotFound, fmt.Sprintf("no waiting acquire with id %q", req.Target)))
		return
	}
	ref.cancel()
	c.send(wire.Reply{ID: req.ID, Type: wire.TypeCancelled, Success: true, Key: ref.key})
}

// forget drops a lease from the connection's table.
func (c *conn) forget(handle string) {
	c.mu.Lock()
	delete(c.leases, handle)
	delete(c.rod, handle)
	c.mu.Unlock()
}

// dropEnded removes an ended lease from the table, unless the entry has
// moved on to a renewed copy (whose own end removes it).
func (c *conn) dropEnded(lease *lock.Lease) {
	c.mu.Lock()
	if c.leases[lease.Handle] == lease {
		delete(c.leases, lease.Handle)
		delete(c.rod, lease.Handle)
	}
	c.mu.Unlock()
}

// liveLeases is how many leases the connection holds: ended ones have
// left the table.
func (c *conn) liveLeases() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.leases)
}

func (c *conn) fail(id string, e *apiError) {
	c.g.metrics.errors.WithLabelValues(e.Code).Inc()
	c.send(wire.Reply{ID: id, Type: wire.TypeError, Error: &e.Error})
}

// send writes a message. A client that does not read (the write deadline
// passes) is disconnected rather than allowed to stall the gateway.
func (c *conn) send(r wire.Reply) {
	if c.ws == nil { // the fuzz target's connection-less handler
		return
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.ctx.Err() != nil {
		return
	}
	c.ws.SetWriteDeadline(time.Now().Add(c.g.opts.WriteTimeout))
	// As WriteJSON wrote it (json.Encoder ends it with a newline), without
	// its reflection.
	c.wbuf = append(r.AppendJSON(c.wbuf[:0]), '\n')
	err := c.ws.WriteMessage(websocket.TextMessage, c.wbuf)
	if cap(c.wbuf) > maxKeptWriteBuffer {
		c.wbuf = nil // an unusually large message: do not keep its buffer
	}
	if err != nil {
		c.g.log.Info("websocket write failed; disconnecting", "client", c.clientID, "err", err)
		c.ws.Close()
	}
}

// sendPing pings the client and re-arms itself until the connection ends.
func (c *conn) sendPing() {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.ctx.Err() != nil {
		return
	}
	if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.g.opts.WriteTimeout)); err != nil {
		c.ws.Close()
		return
	}
	c.ping.Reset(c.g.opts.PingInterval)
}

// goAway closes the connection from the server side. It also ends the
// connection's context at once, as finish would: a reader held up waiting
// for an in-flight slot (back-pressure) would otherwise notice the close
// only when a slot frees, up to opTimeout later, and Close would wait
// for it.
func (c *conn) goAway() {
	c.closeWith(websocket.CloseGoingAway, "gateway closing")
	c.cancel()
}

// closeWith sends a close frame with code and reason, and closes the
// connection.
func (c *conn) closeWith(code int, reason string) {
	if c.ws == nil { // the fuzz target's connection-less handler
		return
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	c.ws.Close()
}

// finish runs when the reader stops: it cancels the waits and releases the
// leases whose clients asked for release on disconnect. Other leases stay
// held until their TTL, so that a reconnecting client can resume them.
func (c *conn) finish() {
	c.writeMu.Lock()
	c.cancel()
	c.ping.Stop()
	c.writeMu.Unlock()
	c.ws.Close()
	c.g.untrack(c)
	c.g.metrics.connections.Dec()
	c.mu.Lock()
	var doomed []*lock.Lease
	for h := range c.rod {
		if l := c.leases[h]; l != nil && l.Err() == nil {
			doomed = append(doomed, l)
		}
	}
	c.leases, c.rod = nil, nil
	c.sessions = nil
	watches := c.watches
	c.watches = nil
	c.mu.Unlock()
	for _, w := range watches {
		w.stop() // their pumps end with the connection's context anyway
	}
	for _, l := range doomed {
		c.releaseQuietly(l)
	}
}

func (c *conn) releaseQuietly(l *lock.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := c.g.tl.Release(ctx, l); err != nil {
		c.g.log.Info("release on disconnect failed", "key", l.Key, "token", l.Token, "err", err)
	}
}

// rated reports whether a command takes a token from its identity's rate
// bucket: what asks for something new. Renewals, keep-alives, releases,
// closes, cancels and unwatches never do.
func rated(cmd int) bool {
	switch cmd {
	case wire.CmdAcquire, wire.CmdTryAcquire, wire.CmdAcquireAll, wire.CmdTryAcquireAll, wire.CmdInspect, wire.CmdWatch, wire.CmdOpenSession:
		return true
	}
	return false
}
