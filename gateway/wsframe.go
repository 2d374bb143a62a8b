package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/lockgate/lockgate/internal/wire"
)

// errTooLarge: a frame over Options.MaxMessageBytes.
var errTooLarge = errors.New("frame too large")

// readFrame reads the next frame, at most Options.MaxMessageBytes of it:
// one that is longer is not read further (errTooLarge), so that the
// connection can say why it closes (readFailed) before it does — gorilla's
// own read limit would close it with 1009 and no reason first.
func (c *conn) readFrame() (int, []byte, error) {
	typ, r, err := c.ws.NextReader()
	if err != nil {
		return 0, nil, err
	}
	// Into the connection's buffer: the frame is handled (decoded, its
	// strings copied) before the reader reads the next one.
	data, err := wire.ReadFrame(r, c.rbuf, c.g.opts.MaxMessageBytes)
	if cap(data) <= wire.MaxKeptFrameBuffer {
		c.rbuf = data[:0]
	} else {
		c.rbuf = nil // an unusually large frame: do not keep its buffer
	}
	if errors.Is(err, wire.ErrFrameTooLarge) {
		return 0, nil, errTooLarge
	}
	if err != nil {
		return 0, nil, err
	}
	return typ, data, nil
}

// readFailed ends a connection whose reader stopped, saying why where the
// client can still hear it: an oversize frame gets a too_large error (its
// id unknown: the frame was not read) and close 1009 with the reason; an
// idle connection gets close 1001 with the reason. A connection the client
// closed or broke is just closed.
func (c *conn) readFailed(err error) {
	var ne net.Error
	switch {
	case errors.Is(err, errTooLarge):
		msg := fmt.Sprintf("a frame over %d bytes; the connection closes (its pending requests get no answer: re-send them on a new connection)", c.g.opts.MaxMessageBytes)
		c.fail("", newError(wire.CodeTooLarge, msg))
		c.closeWith(websocket.CloseMessageTooBig, fmt.Sprintf("frame over %d bytes", c.g.opts.MaxMessageBytes))
	case errors.As(err, &ne) && ne.Timeout():
		c.closeWith(websocket.CloseGoingAway, fmt.Sprintf("idle: nothing received for %v", c.g.opts.IdleTimeout.Round(time.Second)))
	}
}

// hasKey reports whether the request in data has a "key" field (an empty
// one is invalid_key; an absent one missing_field). Only asked when the
// decoded key is empty.
func hasKey(data []byte) bool {
	var v struct {
		Key *string `json:"key"`
	}
	return json.Unmarshal(data, &v) == nil && v.Key != nil
}

// idOf is the id of a request the server could not decode, when the frame
// is a JSON object whose "id" is a string (of any length): its error then
// carries it, so that the client's call ends. Otherwise "": the client
// sent something that is not a request (docs/protocol.md, "Ids").
func idOf(data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return ""
		}
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return ""
		}
		if t == "id" { // exactly: field names are case-sensitive
			var id string
			if json.Unmarshal(v, &id) != nil {
				return ""
			}
			return id
		}
	}
	return ""
}

// originAllowed is the upgrade's Origin policy (Options.AllowedOrigins).
// A page of another origin could otherwise drive a user's browser to take
// and hold locks on a gateway the page's author cannot reach himself.
func (g *Gateway) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true // not a browser page
	}
	if u, err := url.Parse(origin); err == nil && strings.EqualFold(u.Host, r.Host) {
		return true // same origin
	}
	for _, o := range g.opts.AllowedOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	if len(g.opts.AllowedOrigins) > 0 {
		return false
	}
	if _, hasToken := bearer(r); g.opts.Tokens != nil && hasToken {
		// The token, not the page, is the credential. A browser's client
		// certificate is not: the browser presents it to any page's
		// request, as it sends cookies.
		return true
	}
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if tcp, ok := local.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		return true
	}
	g.log.Info("cross-origin WebSocket upgrade refused: no tokens, not loopback, origin not in --allowed-origins", "origin", origin, "remote", r.RemoteAddr)
	return false
}
