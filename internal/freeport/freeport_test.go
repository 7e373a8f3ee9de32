package freeport

import "testing"

// TestPortNeverRepeats: a bind to port 0 hands a just-closed port out
// again (a few hundred binds meet a repeat more often than not), so FreePort
// must remember what it gave; and it stays below the ephemeral range, where
// outgoing connections take their ports.
func TestPortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if p < 20000 || p >= 32000 {
			t.Fatalf("port %d outside 20000-32000", p)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
