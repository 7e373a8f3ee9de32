package heartbeat

import (
	"testing"
	"time"
)

func TestInterval(t *testing.T) {
	for _, c := range []struct{ timeout, want time.Duration }{
		{0, Every}, {time.Minute, Every}, {30 * time.Second, Every},
		{9 * time.Second, 3 * time.Second}, {3 * time.Second, time.Second}, {90 * time.Millisecond, 100 * time.Millisecond},
	} {
		if got := Interval(c.timeout); got != c.want {
			t.Errorf("Interval(%v) = %v, want %v", c.timeout, got, c.want)
		}
	}
}
