package similarity

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAnalyzeTimeoutKeepsFinishedBatches(t *testing.T) {
	f := newFixture(t)
	svc := NewService(f.searcher(), []Dataset{f.ds}, time.Nanosecond)
	got := svc.Analyze(context.Background(), []string{f.exact})
	e, ok := got.(ErrorObject)
	if !ok || !strings.Contains(e.Error, "did not finish") {
		t.Fatalf("want the timeout error, got %#v", got)
	}
	// With time, the answer; then, cached, even a nanosecond is enough for
	// the search part (the cached part is not bounded).
	svc.ValidateTimeout = time.Minute
	if _, ok := svc.Analyze(context.Background(), []string{f.exact, f.unrelated}).(Analysis); !ok {
		t.Fatal("no analysis with a minute")
	}
	before := len(calls(t, f.logPath))
	svc.ValidateTimeout = time.Nanosecond
	a, ok := svc.Analyze(context.Background(), []string{f.unrelated, f.exact, f.exact, ""}).(Analysis)
	if !ok {
		t.Fatal("cached analysis timed out")
	}
	if len(calls(t, f.logPath)) != before {
		t.Error("a cached analysis ran mmseqs")
	}
	s := a[0].Summary
	if a[0].Label != "F/A" || s.CountMax[100] != 2 || s.CountMax[0] != 1 || s.AverageMaxSimilarity != 66.67 {
		t.Errorf("analysis %+v", a[0])
	}
}

func TestAnalyzeNoDatasets(t *testing.T) {
	svc := NewService(&Searcher{Root: t.TempDir()}, []Dataset{{Label: "C", FASTA: filepath.Join(t.TempDir(), "none.fasta")}}, time.Minute)
	if e, ok := svc.Analyze(context.Background(), []string{"MKV"}).(ErrorObject); !ok || e.Error != NoDatasetsMessage {
		t.Errorf("got %#v", e)
	}
}
