package client_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/lockgate/lockgate/lock/locktest"
)

func BenchmarkScratchRaw(b *testing.B) {
	store := locktest.NewMemStore()
	addr := startMemGateway(b, store)
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/v1/ws", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	type rep struct {
		Type         string `json:"type"`
		LockToken    string `json:"lockToken"`
		FencingToken struct {
			Key   string `json:"key"`
			Value uint64 `json:"value"`
		} `json:"fencingToken"`
	}
	var s []time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		ws.WriteJSON(map[string]any{"id": "1", "commandType": 1, "key": "k", "ttl": 60000, "lockToken": "0123456789abcdef0123456789abcdef"})
		var r rep
		_, data, _ := ws.ReadMessage()
		json.Unmarshal(data, &r)
		ws.WriteJSON(map[string]any{"id": "2", "commandType": 2, "key": "k", "lockToken": r.LockToken, "fencingToken": r.FencingToken, "ack": true})
		_, data, _ = ws.ReadMessage()
		s = append(s, time.Since(start))
	}
	b.ReportMetric(float64(median(s).Nanoseconds())/1e3, "p50-µs")
}
