package cli

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestPprofFlags: off without the flag, refused off loopback unless
// allowed, and served on loopback.
func TestPprofFlags(t *testing.T) {
	var off pprofFlags
	stop, err := off.start()
	if err != nil {
		t.Fatal(err)
	}
	stop()

	remote := pprofFlags{addr: "0.0.0.0:0"}
	if _, err := remote.start(); err == nil || !strings.Contains(err.Error(), "--pprof-allow-remote") {
		t.Fatalf("non-loopback profiler address: err %v, want a refusal naming --pprof-allow-remote", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	on := pprofFlags{addr: addr}
	stop, err = on.start()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /debug/pprof/cmdline: %s", resp.Status)
	}
}
