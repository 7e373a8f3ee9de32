package predcache

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestValuesRoundTripExactly: a value read from the cache is the very
// float64 the engine gave (bit for bit) on both dialects: a cached rerun
// writes the same output as the first run.
func TestValuesRoundTripExactly(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		c := New(s)
		r := rand.New(rand.NewPCG(1, 2))
		const n = 5000
		ks := keys(n, 0)
		vals := make([]float64, n)
		puts := make([]Put, n)
		for i := range vals {
			switch i % 3 {
			case 0: // a model's raw output
				vals[i] = math.Pow(10, -4+8*r.Float64())
			case 1: // any finite double
				for {
					vals[i] = math.Float64frombits(r.Uint64())
					if !math.IsNaN(vals[i]) && !math.IsInf(vals[i], 0) {
						break
					}
				}
			default: // a value rounded to 4 decimals, as the synthetic engine gives
				vals[i] = math.Round(math.Pow(10, -2+5*r.Float64())*1e4) / 1e4
			}
			puts[i] = Put{Key: ks[i], Value: &vals[i]}
		}
		if err := c.Store(ctx, "B", "1", puts, time.Now()); err != nil {
			t.Fatal(err)
		}
		got, err := c.Lookup(ctx, ks)
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		byCase := [3]int{}
		for i, k := range ks {
			e, ok := got[k]
			if !ok || e.Value == nil {
				t.Fatalf("unit %d not found", i)
			}
			if math.Float64bits(*e.Value) != math.Float64bits(vals[i]) {
				if bad < 5 {
					t.Errorf("unit %d: stored %v (%x), read %v (%x)", i, vals[i], math.Float64bits(vals[i]), *e.Value, math.Float64bits(*e.Value))
				}
				bad++
				byCase[i%3]++
			}
		}
		if bad > 0 {
			t.Fatalf("%d of %d values changed on the way through the cache (by kind: %v)", bad, n, byCase)
		}
	})
}
