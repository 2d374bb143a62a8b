package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A REST wait that the gateway's Close ends is answered closed (503:
// retry elsewhere), never cancelled: the client did not cancel it, and
// REST has no answer for a cancel but DELETE's 204.
func TestClosedGatewayTicketAnswersClosed(t *testing.T) {
	g, srv := startGateway(t, Options{SyncWindow: 20 * time.Millisecond})
	post := func(body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/locks/k", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		data, _ := io.ReadAll(resp.Body)
		json.Unmarshal(data, &m)
		return resp.StatusCode, m
	}
	if st, m := post(`{}`); st != http.StatusOK {
		t.Fatalf("acquire: %d %v", st, m)
	}
	st, m := post(`{"wait_ms":60000}`)
	if st != http.StatusAccepted {
		t.Fatalf("waiting acquire: %d %v, want 202", st, m)
	}
	g.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(srv.URL + "/tickets/" + m["ticket"].(string))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusAccepted {
			if time.Now().After(deadline) {
				t.Fatal("the ticket still waits 5 s after Close")
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		json.Unmarshal(data, &e)
		if resp.StatusCode != http.StatusServiceUnavailable || e.Error.Code != "closed" {
			t.Fatalf("poll after Close: %d %s, want 503 closed", resp.StatusCode, data)
		}
		return
	}
}
