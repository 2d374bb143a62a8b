package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// Connection liveness: the client pings every pingInterval and drops a
// connection on which nothing (no message, no pong, no ping) arrived for
// idleTimeout, so that a gateway that vanished without closing the TCP
// connection is noticed and the requests it held are re-sent elsewhere.
const (
	pingInterval = 5 * time.Second
	idleTimeout  = 15 * time.Second
	// maxStrikes is how many consecutive unavailable answers, or not_leader
	// answers naming no leader, a connection may give before the client
	// tries another gateway.
	maxStrikes = 3
	// replyBuffer is the per-request queue of replies; a request gets at
	// most a queued and a final reply.
	replyBuffer = 4
	// maxKeptWriteBuffer bounds the encoding buffer a connection keeps
	// between requests.
	maxKeptWriteBuffer = 4 << 10
)

// wsConn is one WebSocket connection to a gateway. Requests are multiplexed
// by id: the reader goroutine hands each reply to the pending request with
// that id; writes are serialised by wmu.
type wsConn struct {
	c    *Client
	ws   *websocket.Conn
	addr string // host:port (or URL) as dialled
	born time.Time
	// wanted: the gateway announced (wire.FeaturesHeader) that it pushes
	// "wanted" to holders whose key another caller waits for.
	wanted bool
	// features: what the gateway's backend offers (wire.FeaturesHeader).
	features lock.Features
	// traceparent: the gateway reads a request's trace context
	// (wire.FeatureTraceparent); an older one would refuse the field.
	traceparent bool

	wmu     sync.Mutex
	writeBy time.Time // the write deadline, under wmu
	wbuf    []byte    // the request being written, under wmu

	pmu     sync.Mutex
	pending map[string]chan *reply
	// streams are the open watches by request id: their "event" messages
	// go there (watch.go), never to pending.
	streams map[string]*stream

	done     chan struct{} // closed when the reader has exited
	closeMu  sync.Mutex
	closed   bool
	cause    error  // why it ended
	redirect string // the address to dial next, when it was closed for a redirect
	avoid    bool   // the next dial should prefer another gateway

	strikes atomic.Int32
	useful  atomic.Bool // it answered a request normally
}

func newConn(c *Client, ws *websocket.Conn, addr string, wanted bool, features lock.Features) *wsConn {
	wc := &wsConn{c: c, ws: ws, addr: addr, born: time.Now(), wanted: wanted, features: features,
		pending: map[string]chan *reply{}, streams: map[string]*stream{}, done: make(chan struct{})}
	ws.SetReadLimit(64 << 10)
	// extend pushes the read deadline idleTimeout ahead, but only once half
	// of it has passed: moving a deadline costs a timer update, too much
	// for every message. It runs on the reader goroutine only (the ping and
	// pong handlers are called from ReadMessage).
	var readBy time.Time
	extend := func() {
		now := time.Now()
		if readBy.Sub(now) < idleTimeout/2 {
			readBy = now.Add(idleTimeout)
			ws.SetReadDeadline(readBy)
		}
	}
	extend()
	ws.SetPongHandler(func(string) error { extend(); return nil })
	ws.SetPingHandler(func(data string) error {
		extend()
		// As gorilla's default handler: a pong that cannot be written is
		// not an error of the reader (the writer side will notice).
		ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
		return nil
	})
	go wc.read(extend)
	go wc.ping()
	return wc
}

// readMessage reads the next message into buf, as ws.ReadMessage does
// into a buffer of its own each time.
func (wc *wsConn) readMessage(buf []byte) ([]byte, error) {
	_, r, err := wc.ws.NextReader()
	if err != nil {
		return buf, err
	}
	return wire.ReadFrame(r, buf, -1)
}

// read dispatches replies until the connection fails.
func (wc *wsConn) read(extend func()) {
	defer close(wc.done)
	var buf []byte // each message is read into it, and decoded before the next
	for {
		data, err := wc.readMessage(buf)
		if cap(data) <= wire.MaxKeptFrameBuffer {
			buf = data[:0]
		} else {
			buf = nil // an unusually large message: do not keep its buffer
		}
		if err != nil {
			wc.close(err)
			wc.failPending()
			return
		}
		extend()
		r := &reply{}
		if err := wire.DecodeReply(data, &r.Reply); err != nil {
			wc.c.log.Warn("lockgate client: undecodable message from the gateway", "addr", wc.addr, "err", err)
			continue
		}
		r.arrived = time.Now()
		if r.ID == "" {
			if r.Type == wire.TypeWanted {
				wc.c.wanted(r)
				continue
			}
			if r.Type == wire.TypeError && r.Error != nil {
				wc.c.log.Warn("lockgate client: gateway error without request id", "addr", wc.addr, "code", r.Error.Code, "message", r.Error.Message)
			}
			continue
		}
		wc.pmu.Lock()
		ch := wc.pending[r.ID]
		st := wc.streams[r.ID]
		wc.pmu.Unlock()
		if st != nil && ch == nil {
			st.deliver(r)
			continue
		}
		if ch == nil {
			continue // a request that gave up (e.g. the reply to a cancel)
		}
		select {
		case ch <- r:
		default:
			wc.c.log.Warn("lockgate client: reply queue full; dropping", "id", r.ID, "type", r.Type)
		}
	}
}

// failPending forgets every pending request; their callers see done.
func (wc *wsConn) failPending() {
	wc.pmu.Lock()
	wc.pending = nil
	wc.streams = nil
	wc.pmu.Unlock()
}

func (wc *wsConn) ping() {
	t := time.NewTicker(pingInterval)
	defer t.Stop()
	for {
		select {
		case <-wc.done:
			return
		case <-t.C:
			if err := wc.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(wc.c.opts.RequestTimeout)); err != nil {
				wc.close(err)
				return
			}
		}
	}
}

// register makes ch receive the replies with id; false if the connection
// has ended.
func (wc *wsConn) register(id string) (chan *reply, bool) {
	ch := make(chan *reply, replyBuffer)
	wc.pmu.Lock()
	defer wc.pmu.Unlock()
	if wc.pending == nil {
		return nil, false
	}
	wc.pending[id] = ch
	return ch, true
}

func (wc *wsConn) unregister(id string) {
	wc.pmu.Lock()
	if wc.pending != nil {
		delete(wc.pending, id)
	}
	wc.pmu.Unlock()
}

// send writes one request. A write error ends the connection.
func (wc *wsConn) send(req *wire.Request) error {
	wc.wmu.Lock()
	defer wc.wmu.Unlock()
	wc.wbuf = req.AppendJSON(wc.wbuf[:0])
	data := wc.wbuf
	if cap(wc.wbuf) > maxKeptWriteBuffer {
		wc.wbuf = nil // an unusually large request: do not keep its buffer
	}
	// A write may block for at most between RequestTimeout/2 and
	// RequestTimeout; the deadline moves only when half of it has passed.
	if now := time.Now(); wc.writeBy.Sub(now) < wc.c.opts.RequestTimeout/2 {
		wc.writeBy = now.Add(wc.c.opts.RequestTimeout)
		wc.ws.SetWriteDeadline(wc.writeBy)
	}
	if err := wc.ws.WriteMessage(websocket.TextMessage, data); err != nil {
		wc.close(err)
		return err
	}
	return nil
}

// close ends the connection (the reader then exits and closes done).
func (wc *wsConn) close(cause error) {
	wc.closeMu.Lock()
	if wc.closed {
		wc.closeMu.Unlock()
		return
	}
	wc.closed = true
	wc.cause = cause
	wc.closeMu.Unlock()
	wc.ws.Close()
}

// goAway closes the connection politely (a close frame first).
func (wc *wsConn) goAway() {
	wc.wmu.Lock()
	wc.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "client closing"), time.Now().Add(time.Second))
	wc.wmu.Unlock()
	wc.close(errors.New("client closed"))
}

// closeFor ends the connection so that the client dials redirect next (a
// not_leader answer), or, with avoid, some other gateway.
func (wc *wsConn) closeFor(redirect string, avoid bool, cause error) {
	wc.closeMu.Lock()
	if !wc.closed {
		wc.redirect, wc.avoid = redirect, avoid
	}
	wc.closeMu.Unlock()
	wc.close(cause)
}

func (wc *wsConn) ended() (cause error, redirect string, avoid bool) {
	wc.closeMu.Lock()
	defer wc.closeMu.Unlock()
	return wc.cause, wc.redirect, wc.avoid
}

// strike counts an unavailable answer or a not_leader naming no leader;
// after maxStrikes in a row the connection is dropped so that another
// gateway is tried.
func (wc *wsConn) strike() {
	if wc.strikes.Add(1) >= maxStrikes {
		wc.closeFor("", true, errors.New("gateway keeps answering unavailable or not_leader without a leader"))
	}
}

func (wc *wsConn) good() {
	if wc.strikes.Load() != 0 {
		wc.strikes.Store(0)
	}
	if !wc.useful.Load() {
		wc.useful.Store(true)
	}
}

// wsURL turns an endpoint ("host:port", or a ws/http URL) into the
// WebSocket URL of the lock protocol; a bare host:port is wss:// when
// secure (the client speaks TLS), else ws://.
func wsURL(endpoint string, secure bool) (string, error) {
	if !strings.Contains(endpoint, "://") {
		if secure {
			endpoint = "wss://" + endpoint
		} else {
			endpoint = "ws://" + endpoint
		}
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("lockgate client: endpoint %q: %w", endpoint, err)
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("lockgate client: endpoint %q: scheme %q is not ws, wss, http or https", endpoint, u.Scheme)
	}
	if u.Host == "" {
		return "", fmt.Errorf("lockgate client: endpoint %q has no host", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/ws"
	}
	return u.String(), nil
}

// dial connects to addr, following handshake redirects (an HTTP 421 whose
// body names the leader, or a 307 with a Location) for at most MaxHops hops.
func (c *Client) dial(ctx context.Context, addr string) (*wsConn, error) {
	d := websocket.Dialer{
		TLSClientConfig:  c.opts.TLSConfig,
		HandshakeTimeout: c.opts.DialTimeout,
		Proxy:            http.ProxyFromEnvironment,
		NetDialContext:   c.opts.NetDial,
		ReadBufferSize:   4096,
		WriteBufferSize:  4096,
	}
	for hop := 0; ; hop++ {
		u, err := wsURL(addr, c.secure)
		if err != nil {
			return nil, err
		}
		dctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
		h := http.Header{"User-Agent": {"lockgate-go-client"}}
		if c.opts.Token != "" {
			h.Set("Authorization", "Bearer "+c.opts.Token)
		}
		ws, resp, err := d.DialContext(dctx, u, h)
		cancel()
		if err == nil {
			wc := newConn(c, ws, addr, hasFeature(resp, wire.FeatureWanted), featuresOf(resp))
			wc.traceparent = hasFeature(resp, wire.FeatureTraceparent)
			return wc, nil
		}
		next := ""
		if resp != nil {
			next = redirectOf(resp)
			resp.Body.Close()
		}
		if next == "" || next == addr || hop >= c.opts.MaxHops {
			if resp != nil && resp.StatusCode == http.StatusUnauthorized {
				return nil, fmt.Errorf("lockgate client: dial %s: %w", addr, ErrUnauthorized)
			}
			if resp != nil {
				return nil, fmt.Errorf("lockgate client: dial %s: %w (HTTP %d)", addr, err, resp.StatusCode)
			}
			return nil, fmt.Errorf("lockgate client: dial %s: %w", addr, err)
		}
		c.log.Debug("lockgate client: handshake redirected", "from", addr, "to", next)
		addr = next
	}
}

// ErrUnauthorized is matched (errors.Is) by the error of a call that could
// not connect because the gateway refused the client's bearer token (or
// its absence) with 401.
var ErrUnauthorized = errors.New("lockgate client: the gateway refused the bearer token (HTTP 401): missing or wrong")

// hasFeature reports whether the upgrade's response lists feature in
// wire.FeaturesHeader.
func hasFeature(resp *http.Response, feature string) bool {
	if resp == nil {
		return false
	}
	for _, v := range resp.Header.Values(wire.FeaturesHeader) {
		for _, f := range strings.Split(v, ",") {
			if strings.TrimSpace(f) == feature {
				return true
			}
		}
	}
	return false
}

// featuresOf reads the features the upgrade's response announces in
// wire.FeaturesHeader (names this client does not know are ignored).
func featuresOf(resp *http.Response) lock.Features {
	if resp == nil {
		return 0
	}
	var names []string
	for _, v := range resp.Header.Values(wire.FeaturesHeader) {
		names = append(names, strings.Split(v, ",")...)
	}
	f, _ := lock.ParseFeatures(names)
	return f
}

// redirectOf reads the leader's address from a refused handshake.
func redirectOf(resp *http.Response) string {
	switch resp.StatusCode {
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusMisdirectedRequest:
	default:
		return ""
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		if u, err := url.Parse(loc); err == nil && u.Host != "" {
			return u.Host
		}
	}
	var body struct {
		Error *wire.Error `json:"error"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body) == nil {
		_, addr := leaderOf(body.Error)
		return addr
	}
	return ""
}
