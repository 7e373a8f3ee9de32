package fairness

import "testing"

func TestClassFor(t *testing.T) {
	for _, tc := range []struct {
		rows        int
		req         string
		small, bulk int
		want        Class
	}{
		{3, RequestAuto, 50, 5000, Interactive},
		{50, RequestAuto, 50, 5000, Interactive},
		{51, RequestAuto, 50, 5000, Normal},
		{5000, RequestAuto, 50, 5000, Normal},
		{5001, RequestAuto, 50, 5000, Bulk},
		{3, RequestBulk, 50, 5000, Bulk},
		{3, RequestAuto, 0, 5000, Normal},
		{1_000_000, RequestAuto, 50, 0, Normal},
	} {
		if got := ClassFor(tc.rows, tc.req, tc.small, tc.bulk); got != tc.want {
			t.Errorf("ClassFor(%d, %q, %d, %d) = %s, want %s", tc.rows, tc.req, tc.small, tc.bulk, got, tc.want)
		}
	}
	// Interactive work is served first, bulk last; normal is Temporal's
	// default, which work started without a priority gets.
	if !(Interactive.PriorityKey() < Normal.PriorityKey() && Normal.PriorityKey() < Bulk.PriorityKey()) || Normal.PriorityKey() != 3 {
		t.Fatalf("priority keys %d %d %d", Interactive.PriorityKey(), Normal.PriorityKey(), Bulk.PriorityKey())
	}
}

func TestParseRequestAndWeight(t *testing.T) {
	for in, want := range map[string]string{"": RequestAuto, " AUTO ": RequestAuto, "bulk": RequestBulk, "Bulk": RequestBulk} {
		if got, err := ParseRequest(in); err != nil || got != want {
			t.Errorf("ParseRequest(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"high", "interactive", "1"} {
		if _, err := ParseRequest(bad); err == nil {
			t.Errorf("ParseRequest(%q) accepted", bad)
		}
	}
	for _, ok := range []string{"0.01", "1", "2", "100"} {
		if _, err := ParseWeight(ok); err != nil {
			t.Errorf("ParseWeight(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"0", "-1", "100.5", "NaN", "Inf", "two", ""} {
		if _, err := ParseWeight(bad); err == nil {
			t.Errorf("ParseWeight(%q) accepted", bad)
		}
	}
}

func TestPriority(t *testing.T) {
	p := Priority(Normal, 17, nil)
	if p.FairnessKey != "key-17" || p.FairnessWeight != 1 || p.PriorityKey != 3 {
		t.Fatalf("default: %+v", p)
	}
	w := 2.5
	if p := Priority(Bulk, 4, &w); p.FairnessWeight != 2.5 || p.PriorityKey != 4 || p.FairnessKey != "key-4" {
		t.Fatalf("weighted: %+v", p)
	}
	// Temporal limits fairness keys to 64 bytes.
	if k := Key(1<<63 - 1); len(k) > 64 {
		t.Fatalf("key %q too long", k)
	}
}
