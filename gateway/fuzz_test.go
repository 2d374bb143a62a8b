package gateway

import (
	"context"
	"testing"

	"github.com/lockgate/lockgate/lock/locktest"
)

// FuzzFrame feeds arbitrary frames to the WebSocket command handler: it
// must never panic, and every frame it rejects gets an error reply.
func FuzzFrame(f *testing.F) {
	for _, s := range []string{
		`{"id":"1","commandType":1,"key":"k","ttl":1000}`,
		`{"id":"2","commandType":2,"key":"k","lockToken":"ab","fencingToken":{"key":"k","value":1}}`,
		`{"id":"3","commandType":3,"key":"k","lockToken":"ab","fencingToken":{"key":"k","value":1},"ttl":5}`,
		`{"id":"4","commandType":4,"key":"k"}`,
		`{"id":"5","commandType":5,"key":"k","value":"v","clientId":"c","releaseOnDisconnect":true}`,
		`{"id":"6","commandType":6,"target":"1"}`,
		`{`, `[]`, `null`, `{"commandType":1e99}`, `{"ttl":-9223372036854775808,"commandType":5,"key":"k"}`,
	} {
		f.Add([]byte(s))
	}
	g := New(locktest.NewMemStore().NewLocker(), Options{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		ctx, cancel := context.WithCancel(context.Background())
		c := g.newConn(nil, ctx, cancel)
		c.handle(frame)
		cancel() // ends any wait the frame started
	})
}
