package result

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/units"
)

// noMethods knows no method: the value column is then "kcat (1/s)".
type noMethods struct{}

func (noMethods) Get(string) (*methods.Descriptor, bool) { return nil, false }

// writeJob writes a one-stage kcat job of three rows: row 0 predicted
// (from the prediction cache when cached), row 1 skipped for its sequence,
// row 2 predicted without a value.
func writeJob(t *testing.T, media, id string, cached bool, pred string) {
	t.Helper()
	dir := filepath.Join(media, "jobs", id)
	sd := filepath.Join(dir, "work", "stage-0")
	if err := os.MkdirAll(sd, 0o755); err != nil {
		t.Fatal(err)
	}
	in := "Protein Sequence,Substrate,Note\nMKV,CCO,a\n,CCO,b\nMKW,CCN,c\n"
	if err := os.WriteFile(filepath.Join(dir, jobfiles.InputFile), []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	sr := jobfiles.StageRows{Target: "kcat", MethodKey: "X",
		Shapes: []units.Row{{Candidates: []units.Candidate{{Sequence: "MKV"}}}, {Skip: units.MissingSequence, SequenceSkip: true}, {Candidates: []units.Candidate{{Sequence: "MKW"}}}},
		Units:  []units.Unit{{Row: 0, Target: "kcat", Substrate: -1}, {Row: 2, Target: "kcat", Substrate: -1}}}
	if err := fsutil.WriteJSONAtomic(filepath.Join(sd, jobfiles.RowsFile), sr); err != nil {
		t.Fatal(err)
	}
	if pred != "" {
		if err := os.WriteFile(filepath.Join(sd, jobfiles.PredFile), []byte(pred), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	v := 2.5
	r0 := units.Result{Value: &v, Source: "X"}
	if cached {
		now := time.Now()
		r0.Cached = &now
	}
	p := jobfiles.StagePredictions{Results: []units.Result{r0, {Error: units.NoPrediction}}, Source: "X"}
	if err := fsutil.WriteJSONAtomic(filepath.Join(sd, jobfiles.PredFile), p); err != nil {
		t.Fatal(err)
	}
}

func build(t *testing.T, media, id string) (*Table, [][]string) {
	t.Helper()
	tab, err := Build(Job{MediaRoot: media, ID: id, Targets: []string{"kcat"}, Methods: map[string]string{"kcat": "X"}, Catalogue: noMethods{}})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(string(tab.CSV))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return tab, recs
}

// TestBuild: the header puts the target's columns first and the input's
// after; a sequence-level skip and a failed unit leave blank values with
// their reasons; the summary counts, groups and refunds.
func TestBuild(t *testing.T) {
	media := t.TempDir()
	writeJob(t, media, "j1", false, "")
	tab, recs := build(t, media, "j1")
	want := []string{"kcat (1/s)", "Source kcat", "Extra Info kcat", "Protein Sequence", "Substrate", "Note"}
	if !slices.Equal(recs[0], want) || !slices.Equal(tab.Header, want) {
		t.Fatalf("header %q, want %q", recs[0], want)
	}
	if recs[1][0] != "2.5" || recs[1][1] != "X" || recs[1][5] != "a" {
		t.Errorf("row 0 %q", recs[1])
	}
	if recs[2][0] != "" || recs[2][1] != units.MissingSequence {
		t.Errorf("row 1 %q", recs[2])
	}
	if recs[3][0] != "" || recs[3][1] == "" {
		t.Errorf("row 2 %q", recs[3])
	}
	if tab.Rows != 3 || tab.FullyPredicted != 1 || tab.FullyCached != 0 || len(tab.CachedRows) != 1 {
		t.Errorf("counts %d/%d/%d/%d", tab.Rows, tab.FullyPredicted, tab.FullyCached, len(tab.CachedRows))
	}
	if !strings.Contains(tab.SkipSummary, `{"rows":[1],"reason":"`+units.MissingSequence+`"}`) {
		t.Errorf("summary %s", tab.SkipSummary)
	}
	if rows, cached := tab.Refund(3); rows != 2 || cached != 0 {
		t.Errorf("refund %d/%d, want 2/0", rows, cached)
	}
}

// TestBuildCached: a fully predicted row served wholly from the cache is
// refunded and counted.
func TestBuildCached(t *testing.T) {
	media := t.TempDir()
	writeJob(t, media, "j2", true, "")
	tab, _ := build(t, media, "j2")
	if tab.FullyCached != 1 {
		t.Fatalf("fully cached %d", tab.FullyCached)
	}
	if rows, cached := tab.Refund(3); rows != 3 || cached != 1 {
		t.Errorf("refund %d/%d, want 3/1", rows, cached)
	}
}

// TestBuildUnreadablePredictions: a stage whose pred.json does not decode
// (a job that failed in it) leaves its cells blank and refunds every row.
func TestBuildUnreadablePredictions(t *testing.T) {
	media := t.TempDir()
	writeJob(t, media, "j3", false, "{not json")
	tab, recs := build(t, media, "j3")
	for _, r := range recs[1:] {
		if r[0] != "" || r[1] != "" {
			t.Errorf("row %q not blank", r)
		}
	}
	if rows, _ := tab.Refund(3); rows != 3 || tab.FullyPredicted != 0 {
		t.Errorf("refund %d, predicted %d", rows, tab.FullyPredicted)
	}
}

// TestBuildBadJobID: an id that is not a folder id is refused.
func TestBuildBadJobID(t *testing.T) {
	if _, err := Build(Job{MediaRoot: t.TempDir(), ID: "../x", Catalogue: noMethods{}}); err == nil {
		t.Fatal("no error")
	}
}
