package similarity

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kinflow/kinflow/internal/testenv"
)

const alphabet = "ACDEFGHIKLMNPQRSTVWY"

// randomSeq is a protein sequence of n residues drawn from r.
func randomSeq(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

// mutate changes a fraction of s's positions (chosen by r) to another residue.
func mutate(r *rand.Rand, s string, fraction float64) string {
	b := []byte(s)
	for _, i := range r.Perm(len(b))[:int(float64(len(b))*fraction)] {
		for {
			c := alphabet[r.IntN(len(alphabet))]
			if c != b[i] {
				b[i] = c
				break
			}
		}
	}
	return string(b)
}

// counting returns a wrapper program around the real mmseqs that logs each
// run's sub-command to the returned file.
func counting(t *testing.T) (prog, logPath string) {
	t.Helper()
	real, err := exec.LookPath("mmseqs")
	if err != nil {
		testenv.Unavailable(t, "mmseqs2 is not installed (Debian package mmseqs2)")
	}
	dir := t.TempDir()
	logPath = filepath.Join(dir, "calls.log")
	prog = filepath.Join(dir, "mmseqs-counting")
	script := fmt.Sprintf("#!/bin/sh\necho \"$1\" >> %q\nexec %q \"$@\"\n", logPath, real)
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return prog, logPath
}

func calls(t *testing.T, logPath string) []string {
	t.Helper()
	data, err := os.ReadFile(logPath)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(data))
}

func writeFASTA(t *testing.T, path string, seqs []string) {
	t.Helper()
	var b strings.Builder
	for i, s := range seqs {
		fmt.Fprintf(&b, ">train_%d\n%s\n", i, s)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

type fixture struct {
	ds                       Dataset
	exact, half, unrelated   string
	root, prog, logPath, dir string
}

func newFixture(t *testing.T) *fixture {
	prog, logPath := counting(t)
	r := rand.New(rand.NewPCG(7, 13))
	dir := t.TempDir()
	train := make([]string, 40)
	for i := range train {
		train[i] = randomSeq(r, 250)
	}
	f := &fixture{dir: dir, root: filepath.Join(dir, "similarity"), prog: prog, logPath: logPath}
	f.exact = train[3]
	f.half = mutate(r, train[7], 0.5)
	f.unrelated = randomSeq(r, 250)
	f.ds = Dataset{Label: "F/A", FASTA: filepath.Join(dir, "train.fasta"), Methods: []string{"F"}}
	writeFASTA(t, f.ds.FASTA, train)
	return f
}

func (f *fixture) searcher() *Searcher {
	// One thread: the test machines are small and shared.
	return &Searcher{Root: f.root, Mmseqs: f.prog, Threads: 1}
}

func TestSearchKnownIdentities(t *testing.T) {
	f := newFixture(t)
	s := f.searcher()
	ctx := context.Background()
	res, err := s.Search(ctx, f.ds, []string{f.exact, f.half, f.unrelated, "", f.exact})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 {
		t.Fatalf("want 3 distinct results, got %d", len(res))
	}
	if got := res[f.exact]; got.Max != 100 || got.Hits < 1 {
		t.Errorf("exact copy: %+v, want max 100", got)
	}
	if got := res[f.half]; got.Max < 40 || got.Max > 65 || got.Hits < 1 {
		t.Errorf("half-mutated copy: %+v, want max about 50", got)
	}
	if got := res[f.unrelated]; got.Max != 0 || got.Mean != 0 || got.Hits != 0 {
		t.Errorf("unrelated: %+v, want no hit", got)
	}
	if _, err := os.Stat(filepath.Join(f.root, "F_A")); err != nil {
		t.Errorf("build folder not named by the label's slug: %v", err)
	}
	got := calls(t, f.logPath)
	if strings.Join(got, " ") != "createdb easy-search" {
		t.Errorf("mmseqs runs: %v, want createdb then one easy-search", got)
	}
}

func TestSearchCachedRunsNoMmseqs(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	first, err := f.searcher().Search(ctx, f.ds, []string{f.exact, f.half})
	if err != nil {
		t.Fatal(err)
	}
	before := len(calls(t, f.logPath))
	// The same searcher, then a fresh one (another process): both answer
	// from the cache.
	s2 := f.searcher()
	for _, s := range []*Searcher{f.searcher(), s2} {
		again, err := s.Search(ctx, f.ds, []string{f.half, f.exact})
		if err != nil {
			t.Fatal(err)
		}
		if again[f.exact] != first[f.exact] || again[f.half] != first[f.half] {
			t.Errorf("cached %+v differs from searched %+v", again, first)
		}
	}
	if n := len(calls(t, f.logPath)); n != before {
		t.Errorf("a cached search ran mmseqs: %v", calls(t, f.logPath)[before:])
	}
	// One new sequence: only it is searched.
	if _, err := s2.Search(ctx, f.ds, []string{f.exact, f.unrelated}); err != nil {
		t.Fatal(err)
	}
	if got := calls(t, f.logPath)[before:]; strings.Join(got, " ") != "easy-search" {
		t.Errorf("runs for one new sequence: %v", got)
	}
	cached, err := s2.Cached(ctx, f.ds, []string{f.unrelated, "MISSING"})
	if err != nil || len(cached) != 1 {
		t.Errorf("Cached: %v, %v", cached, err)
	}
}

func TestChangedFASTARebuilds(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	s := f.searcher()
	dir1, err := s.BuildDir(ctx, f.ds)
	if err != nil {
		t.Fatal(err)
	}
	writeFASTA(t, f.ds.FASTA, []string{f.unrelated})
	dir2, err := s.BuildDir(ctx, f.ds)
	if err != nil {
		t.Fatal(err)
	}
	if dir1 == dir2 {
		t.Fatal("a changed FASTA kept its build")
	}
	res, err := s.Search(ctx, f.ds, []string{f.unrelated})
	if err != nil {
		t.Fatal(err)
	}
	if res[f.unrelated].Max != 100 {
		t.Errorf("new build not used: %+v", res[f.unrelated])
	}
}

func TestConcurrentBuildsOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Separate searchers: they coordinate through the file lock only.
			_, errs[i] = f.searcher().BuildDir(ctx, f.ds)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := calls(t, f.logPath); len(got) != 1 || got[0] != "createdb" {
		t.Errorf("mmseqs runs: %v, want one createdb", got)
	}
}

func TestMissingFASTA(t *testing.T) {
	s := &Searcher{Root: t.TempDir()}
	ds := Dataset{Label: "C", FASTA: filepath.Join(t.TempDir(), "none.fasta")}
	if ds.Present() {
		t.Fatal("missing FASTA reported present")
	}
	if _, err := s.Search(context.Background(), ds, []string{"MKV"}); err == nil {
		t.Fatal("search against a missing FASTA succeeded")
	}
}

func TestTornCacheLine(t *testing.T) {
	b := &build{dir: t.TempDir(), results: map[[32]byte]Identity{}}
	if err := b.append(map[string]Identity{"AAA": {Max: 100, Mean: 90, Hits: 2}}); err != nil {
		t.Fatal(err)
	}
	// A crash mid-append leaves a torn line.
	fh, _ := os.OpenFile(b.resultsFile(), os.O_APPEND|os.O_WRONLY, 0)
	_, _ = fh.WriteString("deadbeef\t1")
	fh.Close()
	if err := b.append(map[string]Identity{"CCC": {Max: 50, Mean: 50, Hits: 1}}); err != nil {
		t.Fatal(err)
	}
	fresh := &build{dir: b.dir, results: map[[32]byte]Identity{}}
	if err := fresh.refresh(); err != nil {
		t.Fatal(err)
	}
	if len(fresh.results) != 2 {
		t.Errorf("want 2 cached results after a torn line, got %d", len(fresh.results))
	}
}

func TestSummarizeHistogram(t *testing.T) {
	rows := []Identity{{Max: 100, Mean: 80}, {Max: 49.5, Mean: 40.25}, {}, {Max: 100, Mean: 100}}
	s := Summarize(rows)
	if s.CountMax[100] != 2 || s.CountMean[40] != 1 {
		t.Errorf("count_max[100]=%d count_mean[40]=%d", s.CountMax[100], s.CountMean[40])
	}
	// 49.5 rounds half to even: 50, as Python's round().
	if s.CountMax[50] != 1 || s.CountMax[0] != 1 {
		t.Errorf("count_max: 50→%d 0→%d", s.CountMax[50], s.CountMax[0])
	}
	if s.HistogramMax[100] != 50 || s.HistogramMax[0] != 25 {
		t.Errorf("histogram_max: 100→%v 0→%v", s.HistogramMax[100], s.HistogramMax[0])
	}
	// kinflow's fix: averages on the 0–100 scale.
	if s.AverageMaxSimilarity != 62.38 || s.AverageMeanSimilarity != 55.06 {
		t.Errorf("averages %v %v, want 62.38 55.06", s.AverageMaxSimilarity, s.AverageMeanSimilarity)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"histogram_max", "histogram_mean", "count_max", "count_mean"} {
		var h map[string]float64
		if err := json.Unmarshal(raw[k], &h); err != nil || len(h) != 101 {
			t.Errorf("%s: %d keys, %v", k, len(h), err)
		}
	}
	if !strings.HasPrefix(string(raw["count_max"]), `{"0":1,"1":0,`) {
		t.Errorf("count_max keys not in numeric order: %.40s", raw["count_max"])
	}
	var back Summary
	if err := json.Unmarshal(b, &back); err != nil || back.CountMax != s.CountMax {
		t.Errorf("round trip: %v", err)
	}
	if empty := Summarize(nil); empty.AverageMaxSimilarity != 0 || empty.CountMax[0] != 0 {
		t.Error("empty summary not zero")
	}
}
