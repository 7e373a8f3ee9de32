package api

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/similarity"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestValidateRunSimilarity answers runSimilarity with a real MMseqs2 search
// against a generated training set: the similarity object keyed by dataset
// label, averages on the 0–100 scale, and an absent dataset left out.
func TestValidateRunSimilarity(t *testing.T) {
	if _, err := exec.LookPath("mmseqs"); err != nil {
		testenv.Unavailable(t, "mmseqs2 is not installed (Debian package mmseqs2)")
	}
	dir := t.TempDir()
	train := strings.Repeat("MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQ", 3)
	fasta := filepath.Join(dir, "b.fasta")
	if err := os.WriteFile(fasta, []byte(">t0\n"+train+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	svc := similarity.NewService(&similarity.Searcher{Root: filepath.Join(dir, "sim"), Threads: 1}, []similarity.Dataset{
		{Label: "B", FASTA: fasta, Methods: []string{"B"}},
		{Label: "C", FASTA: filepath.Join(dir, "absent.fasta"), Methods: []string{"C"}},
	}, time.Minute)
	st := testenv.OpenStore(t, store.SQLite)
	h := newHarness(t, st, func(_ *config.Config, d *Deps) { d.Similarity = svc })
	const ip = "198.51.100.61"
	key := h.newKey(ip)
	unrelated := strings.Repeat("WWPPGGHHCCWWPPGGHHCC", 8)
	content := fmt.Sprintf("Protein Sequence,Substrate\n%s,CCO\n%s,CCO\n%s,O\n,O\n", train, train, unrelated)
	body, ct := multipartBody(t, "in.csv", content, "runSimilarity", "true")
	r := h.do("POST", "/api/v1/validate/", ip, key, body, "Content-Type", ct)
	wantStatus(t, r, 200)
	var rep struct {
		Similarity map[string]json.RawMessage `json:"similarity"`
	}
	if err := json.Unmarshal(r.Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Similarity) != 1 || rep.Similarity["B"] == nil {
		t.Fatalf("similarity keys: %s", r.Body)
	}
	var b similarity.Summary
	if err := json.Unmarshal(rep.Similarity["B"], &b); err != nil {
		t.Fatal(err)
	}
	// Three rows with a sequence: two exact copies (100), one unrelated (0).
	if b.CountMax[100] != 2 || b.CountMax[0] != 1 || b.AverageMaxSimilarity != 66.67 {
		t.Errorf("summary: count_max[100]=%d [0]=%d average_max=%v", b.CountMax[100], b.CountMax[0], b.AverageMaxSimilarity)
	}
	if !strings.Contains(string(rep.Similarity["B"]), `"histogram_max":{"0":33.33333333333333`) {
		t.Errorf("histogram_max: %.80s", rep.Similarity["B"])
	}

	// No dataset present: the error object, HTTP 200.
	empty := similarity.NewService(&similarity.Searcher{Root: filepath.Join(dir, "sim")}, []similarity.Dataset{
		{Label: "C", FASTA: filepath.Join(dir, "absent.fasta")},
	}, time.Minute)
	h2 := newHarness(t, st, func(_ *config.Config, d *Deps) { d.Similarity = empty })
	r = h2.do("POST", "/api/v1/validate/", ip, key, jsonBody(t, map[string]any{
		"data": []map[string]any{{"Protein Sequence": train, "Substrate": "CCO"}}, "runSimilarity": true,
	}), "Content-Type", "application/json")
	wantStatus(t, r, 200)
	if !strings.Contains(r.Body.String(), `"similarity":{"error":"No similarity datasets are available`) {
		t.Errorf("no datasets: %s", r.Body)
	}

	// /health/ reports mmseqs when a dataset is configured.
	r = h.do("GET", "/api/v1/health/", ip, "", nil)
	if !strings.Contains(r.Body.String(), `"mmseqs":"ok"`) {
		t.Errorf("health: %s", r.Body)
	}
}
