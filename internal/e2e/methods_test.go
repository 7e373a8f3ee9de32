package e2e

import (
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/methods"
)

// TestEveryMethodColdThenWarm runs a job for every method of the built-in
// catalogue on a cold cache, then the same job again: the second time no
// embedding work runs at all (no EmbedJob, no file rewritten), except for
// the ephemeral families of F, G and I, which are deleted after each
// prediction by design and so computed again.
func TestEveryMethodColdThenWarm(t *testing.T) {
	s := newStack(t, nil, nil)
	ephemeral := map[string]bool{"F": true, "G": true, "G-O2": true, "I": true}
	for _, d := range methods.Default().All() {
		t.Run(d.Key, func(t *testing.T) {
			s.t = t
			target := string(d.Supports[0])
			input := csvRows(randSeed(), 3, 300)
			sel := map[string]string{target: d.Key}

			before := s.countWorkflows("EmbedJob")
			coldID := s.submit(input, []string{target}, sel)
			cold := s.waitDone(coldID, 90*time.Second)
			if cold.Status != "Completed" {
				t.Fatalf("cold job: %s %s", cold.Status, cold.Error)
			}
			checkSyntheticResult(t, s.resultCSV(coldID), 3)
			if !cold.Synthetic {
				t.Error("status of a synthetic job lacks \"synthetic\": true")
			}
			if d.Profile == methods.ProfileNone {
				if cold.GPU != nil {
					t.Fatalf("method %s has no cache plan but recorded GPU events %v", d.Key, cold.reasons())
				}
			} else {
				r := cold.reasons()
				if len(r) == 0 || (r[len(r)-1] != "done" && r[len(r)-1] != "cache_complete") {
					t.Fatalf("cold events %v", r)
				}
				if cold.Stages[0].Embedding.Total == 0 {
					t.Fatalf("cold plan counted no files: %+v", cold.Stages[0].Embedding)
				}
			}
			files := s.cacheFiles()

			warmID := s.submit(input, []string{target}, sel)
			warm := s.waitDone(warmID, 90*time.Second)
			if warm.Status != "Completed" {
				t.Fatalf("warm job: %s %s", warm.Status, warm.Error)
			}
			checkSyntheticResult(t, s.resultCSV(warmID), 3)
			switch {
			case d.Profile == methods.ProfileNone:
				if warm.GPU != nil {
					t.Fatalf("warm events for a method without plan: %v", warm.reasons())
				}
			case ephemeral[d.Key]:
				if got := warm.reasons(); len(got) == 0 || got[len(got)-1] != "done" {
					t.Fatalf("ephemeral warm events %v, want a recomputation ending in done", got)
				}
			default:
				if got := warm.reasons(); len(got) != 1 || got[0] != "cache_complete" {
					t.Fatalf("warm events %v, want exactly [cache_complete]", got)
				}
				if e := warm.Stages[0].Embedding; e.Need != 0 || e.Cached != e.Total {
					t.Fatalf("warm embedding counts %+v", e)
				}
				after := s.cacheFiles()
				for p, stamp := range files {
					if after[p] != stamp {
						t.Errorf("%s was rewritten by the warm job", p)
					}
				}
				if n := s.countWorkflows("EmbedJob") - before; n > 1 {
					t.Errorf("%d EmbedJobs for a cold and a warm job, want at most 1", n)
				}
			}
		})
	}
}

// checkSyntheticResult checks a result CSV: rows rows, every one with a value
// and a Source cell that says the number is synthetic.
func checkSyntheticResult(t *testing.T, body string, rows int) {
	t.Helper()
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil {
		t.Fatalf("result CSV: %v", err)
	}
	if len(recs) != rows+1 {
		t.Fatalf("result has %d data rows, want %d:\n%s", len(recs)-1, rows, body)
	}
	for i, r := range recs[1:] {
		if r[0] == "" || !strings.Contains(r[1], "Synthetic") || !strings.Contains(r[1], "not a prediction") {
			t.Fatalf("row %d: value %q source %q", i, r[0], r[1])
		}
	}
}
