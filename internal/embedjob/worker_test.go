package embedjob

import "testing"

// The small lane keeps one long poll open per slot, within bounds: below
// one slot is one, and a lane of hundreds of slots does not hold hundreds
// of polls open on the server.
func TestSmallLanePollers(t *testing.T) {
	for _, c := range []struct{ slots, want int }{{-1, 1}, {0, 1}, {1, 1}, {2, 2}, {8, 8}, {32, 32}, {256, 32}} {
		if got := SmallLanePollers(c.slots); got != c.want {
			t.Errorf("SmallLanePollers(%d) = %d, want %d", c.slots, got, c.want)
		}
	}
}
