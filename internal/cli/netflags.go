package cli

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/internal/netguard"
)

// The connection-limit flags of every command that serves HTTP (`node`,
// `serve`, `store`); netguard.Limits documents each limit and its default,
// docs/operations.md ("Connection limits") when to change it.
const (
	flagMaxConns          = "max-conns"
	flagMaxConnsPerIP     = "max-conns-per-ip"
	flagIdleTimeout       = "idle-timeout"
	flagReadHeaderTimeout = "read-header-timeout"
	flagReadTimeout       = "read-timeout"
	flagWriteTimeout      = "write-timeout"
)

// registerNetFlags adds the connection-limit flags to cmd, with netguard's
// defaults. On the command line 0 turns a limit off.
func registerNetFlags(cmd *cobra.Command) {
	d := netguard.DefaultLimits()
	fl := cmd.Flags()
	fl.Int(flagMaxConns, d.MaxConns, "open connections the HTTP server accepts at once; more are closed at accept (0: no cap)")
	fl.Int(flagMaxConnsPerIP, d.MaxConnsPerIP, "open connections from one remote IP; raise it behind a proxy, where every client shares its IP (0: no cap)")
	fl.Duration(flagIdleTimeout, d.IdleTimeout, "close a keep-alive connection idle this long between requests (0: the read timeout)")
	fl.Duration(flagReadHeaderTimeout, d.ReadHeaderTimeout, "close a connection that takes longer to send a request's headers (0: the read timeout)")
	fl.Duration(flagReadTimeout, d.ReadTimeout, "a request's headers and body must arrive within this; a slower body fails (0: none)")
	fl.Duration(flagWriteTimeout, d.WriteTimeout, "a response must be written within this of its request; keep it above the longest operation (0: none)")
}

// netLimits reads back the flags registerNetFlags added to cmd.
func netLimits(cmd *cobra.Command) (netguard.Limits, error) {
	fl := cmd.Flags()
	var l netguard.Limits
	var err error
	// The flag's 0 (off) is netguard's negative; netguard's 0 (default)
	// never comes from a flag, which holds the default itself.
	count := func(name string) int {
		n, e := fl.GetInt(name)
		if e == nil && n < 0 {
			e = fmt.Errorf("--%s %d: want 0 (no cap) or more", name, n)
		}
		if err == nil {
			err = e
		}
		if n == 0 {
			return -1
		}
		return n
	}
	dur := func(name string) time.Duration {
		d, e := fl.GetDuration(name)
		if e == nil && d < 0 {
			e = fmt.Errorf("--%s %v: want 0 (none) or more", name, d)
		}
		if err == nil {
			err = e
		}
		if d == 0 {
			return -1
		}
		return d
	}
	l.MaxConns = count(flagMaxConns)
	l.MaxConnsPerIP = count(flagMaxConnsPerIP)
	l.IdleTimeout = dur(flagIdleTimeout)
	l.ReadHeaderTimeout = dur(flagReadHeaderTimeout)
	l.ReadTimeout = dur(flagReadTimeout)
	l.WriteTimeout = dur(flagWriteTimeout)
	return l, err
}

// listenGuarded listens on addr with the connection caps of lim, under
// TLS when tlsCfg is not nil (the caps apply first: a refused connection
// costs no handshake).
func listenGuarded(addr string, lim netguard.Limits, tlsCfg *tls.Config, logger *slog.Logger) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	var gl net.Listener = netguard.Listen(ln, lim, logger)
	if tlsCfg != nil {
		gl = tls.NewListener(gl, tlsCfg)
	}
	return gl, nil
}
