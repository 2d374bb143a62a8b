package fsm

import (
	"testing"

	"github.com/lockgate/lockgate/lock"
)

// TestHandleIs: the constant-time comparisons accept exactly the stored
// handle, packed (32 hex) or not, and refuse one character off anywhere.
func TestHandleIs(t *testing.T) {
	for _, h := range []string{lock.NewHandle(), lock.NewHandle() + lock.NewHandle()[:8]} {
		var r record
		var hs string
		r.h, hs = packHandle(h)
		r.setHstr(hs)
		if !r.handleIs(h) {
			t.Fatalf("%s: its own handle refused", h)
		}
		for i := range h {
			b := []byte(h)
			b[i] ^= 1 // another character
			if r.handleIs(string(b)) {
				t.Fatalf("%s: accepted %s (char %d changed)", h, b, i)
			}
		}
		if r.handleIs(h[:len(h)-1]) || r.handleIs(h+"0") || r.handleIs("") {
			t.Fatalf("%s: accepted a handle of another length", h)
		}
	}
	if !EqualHandles("", "") || EqualHandles("a", "b") || EqualHandles("ab", "a") {
		t.Fatal("EqualHandles is wrong on short inputs")
	}
}
