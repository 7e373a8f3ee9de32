package predcache

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
	"github.com/kinflow/kinflow/internal/units"
)

func ptr(f float64) *float64 { return &f }

// sameUncertainty reports whether a and b are the same uncertainty, bit
// for bit.
func sameUncertainty(a, b *units.Uncertainty) bool {
	if a == nil || b == nil {
		return a == b
	}
	same := func(x, y *float64) bool {
		if x == nil || y == nil {
			return x == y
		}
		return math.Float64bits(*x) == math.Float64bits(*y)
	}
	return same(&a.Total, &b.Total) && same(a.Aleatoric, b.Aleatoric) && same(a.Epistemic, b.Epistemic) && a.Synthetic == b.Synthetic
}

// TestUncertaintyRoundTrip: an entry's uncertainty (all three numbers, the
// total only, none, the synthetic flag) comes back bit for bit on both
// dialects, from the database and from the memory tier; an entry of a
// method without uncertainty reads back not recorded. An entry stored
// without its method's uncertainty (an older entry) is replaced, value and
// time, by one stored with it, also through the memory tier and with the
// key twice in one store; one stored with it stands.
func TestUncertaintyRoundTrip(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		t1 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
		ks := keys(7, 11)
		third := 1.0 / 3
		puts := []Put{
			{Key: ks[0], Value: ptr(12.5), UncertaintyRecorded: true,
				Uncertainty: &units.Uncertainty{Total: 0.4123456789012345, Aleatoric: ptr(third), Epistemic: ptr(math.Nextafter(0.3, 1))}},
			{Key: ks[1], Value: ptr(3), UncertaintyRecorded: true, Uncertainty: &units.Uncertainty{Total: 0.25}},
			{Key: ks[2], Value: ptr(4), UncertaintyRecorded: true}, // the method gave none for this unit
			{Key: ks[3], Error: "Invalid SMILES", UncertaintyRecorded: true},
			{Key: ks[4], Value: ptr(0.5), UncertaintyRecorded: true,
				Uncertainty: &units.Uncertainty{Total: 0.6, Aleatoric: ptr(0.48), Epistemic: ptr(0.36), Synthetic: true}},
			{Key: ks[5], Value: ptr(7)}, // a method without uncertainty
		}
		worker := New(s).WithMemory(0)
		if err := worker.Store(ctx, "E", "1", puts, t1); err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]*Cache{"database": New(s), "memory": worker} {
			got, err := c.Lookup(ctx, ks)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 6 {
				t.Fatalf("%s: %d found, want 6", name, len(got))
			}
			for i, p := range puts {
				e := got[p.Key]
				if !sameUncertainty(e.Uncertainty, p.Uncertainty) || e.UncertaintyRecorded != p.UncertaintyRecorded || e.Error != p.Error ||
					(p.Value != nil && (e.Value == nil || *e.Value != *p.Value)) {
					t.Errorf("%s: entry %d read %+v (uncertainty %+v), stored %+v", name, i, e, e.Uncertainty, p)
				}
			}
		}

		// Refused: an uncertainty without a value, or not marked recorded.
		for _, p := range []Put{
			{Key: ks[6], Error: "x", UncertaintyRecorded: true, Uncertainty: &units.Uncertainty{Total: 1}},
			{Key: ks[6], Value: ptr(1), Uncertainty: &units.Uncertainty{Total: 1}},
		} {
			if err := worker.Store(ctx, "E", "1", []Put{p}, t1); err == nil {
				t.Errorf("stored %+v", p)
			}
		}

		// ks[5] was stored without uncertainty: the method now gives it, and
		// its next computation replaces the entry (the key twice in one
		// store, as two identical rows of a stage give).
		t2 := t1.Add(time.Hour)
		newer := Put{Key: ks[5], Value: ptr(7.25), UncertaintyRecorded: true, Uncertainty: &units.Uncertainty{Total: 0.3, Aleatoric: ptr(0.2)}}
		if err := worker.Store(ctx, "E", "1", []Put{newer, newer}, t2); err != nil {
			t.Fatal(err)
		}
		// And ks[0], stored with it, stands against a later store.
		if err := worker.Store(ctx, "E", "1", []Put{{Key: ks[0], Value: ptr(99), UncertaintyRecorded: true, Uncertainty: &units.Uncertainty{Total: 9}}}, t2); err != nil {
			t.Fatal(err)
		}
		// Nor does an entry without uncertainty replace one with it.
		if err := worker.Store(ctx, "E", "1", []Put{{Key: ks[1], Value: ptr(98)}}, t2); err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]*Cache{"database": New(s), "memory": worker} {
			got, err := c.Lookup(ctx, ks[:6])
			if err != nil {
				t.Fatal(err)
			}
			if e := got[ks[5]]; e.Value == nil || *e.Value != 7.25 || !e.UncertaintyRecorded || !sameUncertainty(e.Uncertainty, newer.Uncertainty) || !e.FirstComputed.Equal(t2) {
				t.Errorf("%s: the older entry was not replaced: %+v", name, e)
			}
			if e := got[ks[0]]; *e.Value != 12.5 || !sameUncertainty(e.Uncertainty, puts[0].Uncertainty) || !e.FirstComputed.Equal(t1) {
				t.Errorf("%s: an entry with its uncertainty was replaced: %+v", name, e)
			}
			if e := got[ks[1]]; *e.Value != 3 || !e.UncertaintyRecorded {
				t.Errorf("%s: an entry without uncertainty replaced one with it: %+v", name, e)
			}
		}
		if n, _ := worker.Count(ctx, "E"); n != 6 {
			t.Fatalf("%d entries, want 6", n)
		}
	})
}

// BenchmarkLookup10kUncertainty is BenchmarkLookup10k for a method that
// gives uncertainty: every entry with all three numbers.
func BenchmarkLookup10kUncertainty(b *testing.B) {
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		b.Run(string(d), func(b *testing.B) {
			s := testenv.OpenStore(b, d)
			ctx := context.Background()
			c := New(s)
			ks := keys(10000, 5)
			puts := make([]Put, len(ks))
			for i := range ks {
				v, t := float64(i)*1.5, 0.2+float64(i%600)/1000
				puts[i] = Put{Key: ks[i], Value: &v, UncertaintyRecorded: true,
					Uncertainty: &units.Uncertainty{Total: t, Aleatoric: ptr(t * 0.8), Epistemic: ptr(t * 0.6)}}
			}
			before := tableBytes(b, s)
			if err := c.Store(ctx, "E", "1", puts, time.Now()); err != nil {
				b.Fatal(err)
			}
			size := float64(tableBytes(b, s)-before) / float64(len(ks))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				got, err := c.Lookup(ctx, ks)
				if err != nil || len(got) != len(ks) || got[ks[1]].Uncertainty == nil {
					b.Fatalf("%d found: %v", len(got), err)
				}
			}
			b.ReportMetric(size, "bytes/unit")
		})
	}
}
