package predcache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm/schema"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

func baseStage() Stage {
	return Stage{Target: "kcat", Method: "B", ModelVersion: "1", EngineFingerprint: "eng-1",
		Families: map[string]string{"fam_a": "fp-a", "fam_b": "fp-b"}, FixedArgs: "cmd", Canonicalize: true}
}

func baseUnit() Unit {
	return Unit{Seq: "MKTAYIAK", Substrates: []string{"CCO"}, Kwargs: map[string]string{"smiles": "CCO", "x": "1"}}
}

// TestKeyCoversEverythingThatDeterminesTheValue: the same stage and unit
// give the same key whatever the maps' order; a change to any one field
// gives another.
func TestKeyCoversEverythingThatDeterminesTheValue(t *testing.T) {
	k0 := NewKeyer(baseStage()).Key(baseUnit())
	st2 := baseStage()
	st2.Families = map[string]string{"fam_b": "fp-b", "fam_a": "fp-a"}
	if NewKeyer(st2).Key(baseUnit()) != k0 {
		t.Fatal("key depends on map order")
	}
	stages := map[string]func(*Stage){
		"target":        func(s *Stage) { s.Target = "Km" },
		"method":        func(s *Stage) { s.Method = "C" },
		"model version": func(s *Stage) { s.ModelVersion = "2" },
		"engine":        func(s *Stage) { s.EngineFingerprint = "eng-2" },
		"family fp":     func(s *Stage) { s.Families = map[string]string{"fam_a": "fp-a", "fam_b": "fp-B"} },
		"family gone":   func(s *Stage) { s.Families = map[string]string{"fam_a": "fp-a"} },
		"fixed args":    func(s *Stage) { s.FixedArgs = "cmd2" },
		"canonicalize":  func(s *Stage) { s.Canonicalize = false },
	}
	seen := map[Key]string{k0: "base"}
	for name, f := range stages {
		st := baseStage()
		f(&st)
		k := NewKeyer(st).Key(baseUnit())
		if prev, ok := seen[k]; ok {
			t.Errorf("%s: same key as %s", name, prev)
		}
		seen[k] = name
	}
	units := map[string]func(*Unit){
		"seq":            func(u *Unit) { u.Seq = "MKTAYIAR" },
		"substrate":      func(u *Unit) { u.Substrates = []string{"CCN"} },
		"substrate list": func(u *Unit) { u.Substrates = []string{"CC", "O"} },
		"products":       func(u *Unit) { u.Products = []string{"CC=O"} },
		"kwarg":          func(u *Unit) { u.Kwargs = map[string]string{"smiles": "CCO", "x": "2"} },
		// A value cannot slide from one field into the next.
		"shifted": func(u *Unit) { u.Seq = "MKTAYIAKCCO"; u.Substrates = []string{""} },
	}
	for name, f := range units {
		u := baseUnit()
		f(&u)
		k := NewKeyer(baseStage()).Key(u)
		if prev, ok := seen[k]; ok {
			t.Errorf("%s: same key as %s", name, prev)
		}
		seen[k] = name
	}
}

func keys(n, salt int) []Key {
	kr := NewKeyer(baseStage())
	out := make([]Key, n)
	for i := range out {
		out[i] = kr.Key(Unit{Seq: fmt.Sprintf("MKT%08d%d", i, salt), Substrates: []string{"CCO"}})
	}
	return out
}

func TestStoreLookupPurge(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		c := New(s)
		t1 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
		ks := keys(3, 0)
		v := 12.5
		if err := c.Store(ctx, "B", "1", []Put{{Key: ks[0], Value: &v}, {Key: ks[1], Error: "Invalid SMILES"}}, t1); err != nil {
			t.Fatal(err)
		}
		// Stored again later (another job computed it too): the first stands.
		w := 99.0
		if err := c.Store(ctx, "B", "1", []Put{{Key: ks[0], Value: &w}}, t1.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		got, err := c.Lookup(ctx, ks)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[ks[0]].Value == nil || *got[ks[0]].Value != 12.5 || !got[ks[0]].FirstComputed.Equal(t1) ||
			got[ks[1]].Value != nil || got[ks[1]].Error != "Invalid SMILES" {
			t.Fatalf("lookup %+v", got)
		}
		if _, ok := got[ks[2]]; ok {
			t.Fatal("a key never stored was found")
		}
		if err := c.Store(ctx, "B", "1", []Put{{Key: ks[2]}}, t1); err == nil {
			t.Fatal("an entry with neither value nor error was stored")
		}
		// Purge by version, then by method.
		if err := c.Store(ctx, "B", "2", []Put{{Key: ks[2], Value: &v}}, t1); err != nil {
			t.Fatal(err)
		}
		if err := c.Store(ctx, "C", "1", []Put{{Key: keys(1, 9)[0], Value: &v}}, t1); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Purge(ctx, "B", "2"); err != nil || n != 1 {
			t.Fatalf("purge B v2: %d %v", n, err)
		}
		if n, err := c.Purge(ctx, "B", ""); err != nil || n != 2 {
			t.Fatalf("purge B: %d %v", n, err)
		}
		if n, _ := c.Count(ctx, ""); n != 1 {
			t.Fatalf("%d left, want C's 1", n)
		}
		if _, err := c.Purge(ctx, "", ""); err != ErrNoMethod {
			t.Fatalf("purge without a method: %v", err)
		}
		// The model matches the migration's table.
		sch, err := schema.Parse(&row{}, &sync.Map{}, s.DB.NamingStrategy)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range sch.Fields {
			if !s.DB.Migrator().HasColumn(&row{}, f.DBName) {
				t.Errorf("prediction_cache.%s missing", f.DBName)
			}
		}
	})
}

// TestLookupManyAndConcurrentStores: more keys than one lookup chunk, and
// two writers storing overlapping entries at once.
func TestLookupManyAndConcurrentStores(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		c := New(s)
		ks := keys(lookupChunk+500, 1)
		puts := make([]Put, len(ks))
		for i := range ks {
			v := float64(i)
			puts[i] = Put{Key: ks[i], Value: &v}
		}
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for _, part := range [][]Put{puts[:8000], puts[5000:]} {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- c.Store(ctx, "B", "1", part, time.Now()) }()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		got, err := c.Lookup(ctx, ks)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(ks) {
			t.Fatalf("%d of %d found", len(got), len(ks))
		}
		for i, k := range ks {
			if v := got[k].Value; v == nil || *v != float64(i) {
				t.Fatalf("key %d: value %v", i, v)
			}
		}
	})
}

// BenchmarkLookup10k is the cost of looking up one 10,000-unit stage (all
// present) and reports the table's size per entry.
func BenchmarkLookup10k(b *testing.B) {
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		b.Run(string(d), func(b *testing.B) {
			s := testenv.OpenStore(b, d)
			ctx := context.Background()
			c := New(s)
			ks := keys(10000, 2)
			puts := make([]Put, len(ks))
			for i := range ks {
				v := float64(i) * 1.5
				puts[i] = Put{Key: ks[i], Value: &v}
			}
			before := tableBytes(b, s)
			if err := c.Store(ctx, "B", "1", puts, time.Now()); err != nil {
				b.Fatal(err)
			}
			size := float64(tableBytes(b, s)-before) / float64(len(ks))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				got, err := c.Lookup(ctx, ks)
				if err != nil || len(got) != len(ks) {
					b.Fatalf("%d found: %v", len(got), err)
				}
			}
			b.ReportMetric(size, "bytes/unit")
		})
	}
}

// BenchmarkStore10k is the cost of writing one 10,000-unit stage back.
func BenchmarkStore10k(b *testing.B) {
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		b.Run(string(d), func(b *testing.B) {
			s := testenv.OpenStore(b, d)
			c := New(s)
			for i := 0; i < b.N; i++ {
				ks := keys(10000, 100+i)
				puts := make([]Put, len(ks))
				for j := range ks {
					v := float64(j)
					puts[j] = Put{Key: ks[j], Value: &v}
				}
				if err := c.Store(context.Background(), "B", "1", puts, time.Now()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// tableBytes is the cache table's size on disk with its index: Postgres's
// own count, or the SQLite file's size after a checkpoint.
func tableBytes(tb testing.TB, s *store.Store) int64 {
	tb.Helper()
	var n int64
	if s.Dialect == store.Postgres {
		s.DB.Exec("VACUUM ANALYZE prediction_cache")
		s.DB.Raw("SELECT pg_total_relation_size('prediction_cache')").Scan(&n)
		return n
	}
	s.DB.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	var file string
	s.DB.Raw("SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&file)
	fi, err := os.Stat(filepath.Clean(file))
	if err != nil {
		tb.Fatal(err)
	}
	return fi.Size()
}
