package netguard

import "testing"

// TestLoopback: which addresses count as loopback for the development
// modes (plaintext Raft, open membership, a fenced store without tokens).
func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:50051": true, "127.3.0.1:1": true, "[::1]:50051": true, "localhost:50051": true,
		"0.0.0.0:50051": false, ":50051": false, "10.0.0.1:50051": false, "raft1:50051": false, "[::]:1": false,
		"127.0.0.1": false, // no port: not an address a server listens on
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
