package testenv

import "testing"

// TestFreePortNeverRepeats: the kernel hands a just-closed port out again
// (a few hundred binds to port 0 meet a repeat more often than not), so
// FreePort must remember what it gave.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
