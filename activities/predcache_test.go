package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/predcache"
	"github.com/kinflow/kinflow/internal/provenance"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
	"github.com/kinflow/kinflow/internal/units"
)

// cacheJob submits csv as job id (kcat by B) with the prediction cache on
// (use true) or off, runs Predict, and returns the results and the number
// of rows the engine program was given (0: not called).
func (h *predictHarness) cacheJob(id, csv string, use bool) (jobfiles.StagePredictions, int) {
	h.t.Helper()
	h.submit(id, map[string]string{"kcat": "B"}, true, csv)
	h.a.Store.DB.Model(&store.Job{}).Where("id = ?", id).Update("use_prediction_cache", use)
	p, err := h.predict(id, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(h.keep, "B_input_"+id+".json"))
	if os.IsNotExist(err) {
		return p, 0
	}
	if err != nil {
		h.t.Fatal(err)
	}
	var in methods.EngineInput
	if err := json.Unmarshal(raw, &in); err != nil {
		h.t.Fatal(err)
	}
	return p, len(in.Rows)
}

func rowsCSV(seqs ...string) string {
	var b strings.Builder
	b.WriteString("Protein Sequence,Substrate\n")
	for _, s := range seqs {
		sub := "CCO"
		if strings.HasSuffix(s, "W") {
			sub = "O" // the stand-in engine's per-row failure
		}
		fmt.Fprintf(&b, "%s,%s\n", s, sub)
	}
	return b.String()
}

// TestPredictionCacheCommandEngine: with the command engine and a stand-in
// program, a second run of the same job calls the program for 0 rows and
// gives the same values and failure reasons, marked cached; a job with half
// its rows new sends exactly those; a changed model_version or engine
// program misses; usePredictionCache=false predicts everything.
func TestPredictionCacheCommandEngine(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		h := newPredictHarness(t, s, nil, "")
		h.a.PredCache = predcache.New(s)
		seqs := []string{"MKTAYIAK", "MKTAYW", "MKTAYIAKQRQ", "MKTAYI"}
		first, n := h.cacheJob("cachejob1", rowsCSV(seqs...), true)
		if n != 4 {
			t.Fatalf("first run sent %d rows, want 4", n)
		}
		wantValues(t, first, "8", "-: water is not a substrate", "11", "6")
		again, n := h.cacheJob("cachejob2", rowsCSV(seqs...), true)
		if n != 0 {
			t.Fatalf("second run sent %d rows, want 0", n)
		}
		wantValues(t, again, values(first)...)
		for i, r := range again.Results {
			if r.Cached == nil || r.Cached.After(time.Now()) {
				t.Fatalf("unit %d not marked cached: %+v", i, r)
			}
		}
		if again.Source != "Prediction from Method B" || again.Results[0].Source != again.Source {
			t.Errorf("source %q / %q", again.Source, again.Results[0].Source)
		}
		stages, _ := s.JobStages(context.Background(), "cachejob2")
		job, _ := s.Job(context.Background(), "cachejob2")
		if stages[0].PredictionsCached != 4 || job.PredictionsCached != 4 || stages[0].PredictionsMade != 3 {
			t.Fatalf("counters: stage %d/%d, job %d", stages[0].PredictionsCached, stages[0].PredictionsMade, job.PredictionsCached)
		}
		dir, _ := h.a.stageDir("cachejob2", 0)
		var prov provenance.Stage
		if err := readJSONFile(filepath.Join(dir, provenanceFile), &prov); err != nil {
			t.Fatal(err)
		}
		if prov.PredictionsCached != 4 || len(prov.CachedRows) != 4 || prov.CachedRows[3].Row != 3 || prov.CachedRows[0].FirstComputedAt == "" {
			t.Fatalf("provenance %+v", prov)
		}

		// Half new: exactly the new rows are sent.
		_, n = h.cacheJob("cachejob3", rowsCSV("MKTAYIAK", "MKTAYIAKQRQ", "MKTAYIAKQRQIS", "MKTAYIAKQRQISF"), true)
		if n != 2 {
			t.Fatalf("half-new run sent %d rows, want 2", n)
		}
		// The cache off: everything sent (and the cache still filled).
		if _, n = h.cacheJob("cachejob4", rowsCSV(seqs...), false); n != 4 {
			t.Fatalf("usePredictionCache=false sent %d rows, want 4", n)
		}
		// A new model_version misses.
		d, _ := h.a.Catalogue.Get("B")
		d.ModelVersion = "2"
		if _, n = h.cacheJob("cachejob5", rowsCSV(seqs...), true); n != 4 {
			t.Fatalf("new model version sent %d rows, want 4", n)
		}
		if _, n = h.cacheJob("cachejob6", rowsCSV(seqs...), true); n != 0 {
			t.Fatalf("version 2 again sent %d rows, want 0", n)
		}
		// A changed engine program (its fingerprint) misses.
		prog := d.Command.Script
		b, _ := os.ReadFile(prog)
		if err := os.WriteFile(prog, append(b, []byte("\n# changed\n")...), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, n = h.cacheJob("cachejob7", rowsCSV(seqs...), true); n != 4 {
			t.Fatalf("changed engine sent %d rows, want 4", n)
		}
		// A file changed in place in the method's {data_dir} misses.
		data := t.TempDir()
		table := filepath.Join(data, "table.tsv")
		if err := os.WriteFile(table, []byte("a\t1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		paths := map[string]string{"data_dir": data}
		for k, v := range d.Command.Paths {
			paths[k] = v
		}
		d.Command.Paths = paths
		if _, n = h.cacheJob("cachejob8", rowsCSV(seqs...), true); n != 4 {
			t.Fatalf("a new data_dir sent %d rows, want 4", n)
		}
		if _, n = h.cacheJob("cachejob9", rowsCSV(seqs...), true); n != 0 {
			t.Fatalf("the same data_dir again sent %d rows, want 0", n)
		}
		if err := os.WriteFile(table, []byte("a\t2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(time.Minute)
		_ = os.Chtimes(table, later, later)
		if _, n = h.cacheJob("cachejob10", rowsCSV(seqs...), true); n != 4 {
			t.Fatalf("a changed data_dir file sent %d rows, want 4", n)
		}
	})
}

// TestTransientFailuresAreNotCached: a unit that failed for a transient
// reason (the engine's out-of-memory text) is not stored, so the next job
// sends it again; a deterministic failure (bad input) and values are served
// from the cache.
func TestTransientFailuresAreNotCached(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		h := newPredictHarness(t, s, nil, "")
		h.a.PredCache = predcache.New(s)
		csv := "Protein Sequence,Substrate\nMKTAYIAK,CCO\nMKTAYW,O\nMKTAYIAKQRQ,OO\n"
		first, n := h.cacheJob("transient1", csv, true)
		if n != 3 || !strings.Contains(first.Results[2].Error, "out of memory") {
			t.Fatalf("first run: sent %d, %+v", n, first.Results)
		}
		again, n := h.cacheJob("transient2", csv, true)
		if n != 1 || again.Results[2].Cached != nil || again.Results[0].Cached == nil || again.Results[1].Cached == nil {
			t.Fatalf("second run sent %d rows, want only the out-of-memory one: %+v", n, again.Results)
		}
	})
}

// TestPredictionCacheSyntheticEngine: the synthetic engine caches too; the
// second run's values are the first's, all marked cached and synthetic.
func TestPredictionCacheSyntheticEngine(t *testing.T) {
	s := testenv.OpenStore(t, store.SQLite)
	h := newPredictHarness(t, s, nil, "")
	h.a.Config.PredictionEngine = "synthetic"
	h.a.PredCache = predcache.New(s)
	seqs := []string{"MKTAYIAK", "MKTAYV", "MKTAYIAKQRQ"}
	first, _ := h.cacheJob("synjob1", rowsCSV(seqs...), true)
	second, _ := h.cacheJob("synjob2", rowsCSV(append(seqs, "MKTAYIAKQRQISF")...), true)
	if !first.Synthetic || !second.Synthetic || !strings.Contains(second.Source, "Synthetic placeholder") {
		t.Fatalf("synthetic flags %v %v %q", first.Synthetic, second.Synthetic, second.Source)
	}
	for i := range seqs {
		if second.Results[i].Cached == nil || *second.Results[i].Value != *first.Results[i].Value {
			t.Fatalf("unit %d: %+v vs %+v", i, second.Results[i], first.Results[i])
		}
	}
	if second.Results[3].Cached != nil || second.Results[3].Value == nil {
		t.Fatalf("new unit %+v", second.Results[3])
	}
	stages, _ := s.JobStages(context.Background(), "synjob2")
	if stages[0].PredictionsCached != 3 {
		t.Fatalf("cached %d", stages[0].PredictionsCached)
	}
}

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// TestStageCacheBypass: the cache is neither read nor written when a key
// could not name what the values depend on: a family of unknown origin, or
// a real engine that read synthetic files of a family recorded as real.
func TestStageCacheBypass(t *testing.T) {
	s := testenv.OpenStore(t, store.SQLite)
	h := newPredictHarness(t, s, nil, "")
	h.a.PredCache = predcache.New(s)
	d, _ := h.a.Catalogue.Get("B")
	sr := jobfiles.StageRows{Target: "kcat", MethodKey: "B", Units: []units.Unit{{Seq: "MKT", Substrates: []string{"CCO"}}}}
	job := &store.Job{UsePredictionCache: true}
	for _, tc := range []struct {
		name string
		prov provenance.Stage
		want bool
	}{
		{"verified", provenance.Stage{Families: map[string]string{"f": "fp-1"}}, true},
		{"unverified", provenance.Stage{Families: map[string]string{"f": provenance.UnverifiedID}, Unverified: []string{"f"}}, false},
		{"mixed family", provenance.Stage{Families: map[string]string{"f": "fp-1"}, SyntheticArtefacts: true}, false},
		{"all synthetic", provenance.Stage{Families: map[string]string{"f": "synthetic-1"}, SyntheticArtefacts: true}, true},
	} {
		got := h.a.stageCache(context.Background(), job, d, sr, tc.prov, []int{0}, h.a.Log) != nil
		if got != tc.want {
			t.Errorf("%s: cache used %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestFixedArgsNameMethodECheckpoints: method E's model weights are read
// from the configured checkpoint root (METHODE_CHECKPOINT_ROOT), which
// neither its command nor its engine fingerprint names: another root is
// another key. A method that does not read it keeps its key.
func TestFixedArgsNameMethodECheckpoints(t *testing.T) {
	cat := methods.Default()
	e, ok := cat.Get("E")
	if !ok {
		t.Fatal("no method E")
	}
	b, _ := cat.Get("B")
	if fixedArgs(e, methods.Kcat, "/ckpt/v1") == fixedArgs(e, methods.Kcat, "/ckpt/v2") {
		t.Fatal("method E's key ignores its checkpoint root")
	}
	if fixedArgs(b, methods.Kcat, "/ckpt/v1") != fixedArgs(b, methods.Kcat, "/ckpt/v2") {
		t.Fatal("method B's key follows a checkpoint root it does not read")
	}
}
