package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// The SDK is a lock.Locker that speaks the WebSocket protocol to any
// lockgate endpoint (a raftlock node, `lockgate serve`). Here a gateway
// over the in-memory reference locker serves it on a loopback port.
func Example() {
	mem := locktest.NewMemStore().NewLocker()
	g := gateway.New(mem, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(g)
	defer srv.Close()
	defer g.Close()

	c, err := client.New([]string{strings.TrimPrefix(srv.URL, "http://")}, client.Options{ClientID: "example"})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	lease, err := c.Acquire(ctx, "nightly-report", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		panic(err)
	}
	fmt.Println("held by", lease.Owner, "with fencing token", lease.Token)
	info, err := c.Inspect(ctx, "nightly-report")
	if err != nil {
		panic(err)
	}
	fmt.Println("inspect sees token", info.Token)
	if err := c.Release(ctx, lease); err != nil {
		panic(err)
	}
	_, err = c.Inspect(ctx, "nightly-report")
	fmt.Println("after release:", err != nil)
	// Output:
	// held by example with fencing token 1
	// inspect sees token 1
	// after release: true
}
