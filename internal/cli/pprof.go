package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/internal/netguard"
)

// pprofFlags serve the Go runtime's profiles (net/http/pprof) on an
// address of their own, apart from the API: off unless --pprof-addr is
// given, and only on loopback unless --pprof-allow-remote says otherwise,
// since a profile shows the process's memory and costs it CPU.
type pprofFlags struct {
	addr        string
	allowRemote bool
}

func (f *pprofFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.addr, "pprof-addr", "", "serve the Go profiler (net/http/pprof: /debug/pprof/) on this address, e.g. 127.0.0.1:6060; off by default, loopback only unless --pprof-allow-remote; it has no authentication")
	cmd.Flags().BoolVar(&f.allowRemote, "pprof-allow-remote", false, "let --pprof-addr be an address that is not loopback (anyone who reaches it can read profiles, goroutine stacks and the command line)")
}

// start serves the profiler when --pprof-addr is set; the returned stop
// closes it. Nothing is served, and stop does nothing, without the flag.
func (f *pprofFlags) start() (stop func(), err error) {
	if f.addr == "" {
		return func() {}, nil
	}
	if !f.allowRemote && !netguard.Loopback(f.addr) {
		return nil, fmt.Errorf("--pprof-addr %s is not a loopback address: the profiler has no authentication (add --pprof-allow-remote to serve it there anyway)", f.addr)
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr %s: %w", f.addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("profiler stopped", "err", err)
		}
	}()
	slog.Info("profiler", "addr", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() { srv.Close() }, nil
}
