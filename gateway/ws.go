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
	rbuf    []byte // the frame being read, the reader's own

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
	// is what the connection holds. An entry is the Lease itself, one
	// pointer keyed by its own Handle (leaseTable: the scale bench counts
	// the gateway's bytes per held lease); nil once the connection ended.
	leases *leaseTable
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
	if r.Method != http.MethodGet {
		// As every other path answers a method it does not have (the
		// WebSocket library's own answer is text without Allow).
		w.Header().Set("Allow", "GET")
		g.writeError(w, r, newError(wire.CodeMethodNotAllowed, r.Method+" is not allowed on /v1/ws: the upgrade is a GET"))
		return
	}
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
		leases:   newLeaseTable(),
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
		if l := c.leases.get(h); l != nil && l.Err() == nil {
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
