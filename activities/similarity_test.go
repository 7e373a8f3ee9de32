package activities

import (
	"context"
	"encoding/csv"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/similarity"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

const ethanolInChI = "InChI=1S/C2H6O/c1-2-3/h3H,2H2,1H3"

func randSeq(r *rand.Rand, n int) string {
	const aa = "ACDEFGHIKLMNPQRSTVWY"
	b := make([]byte, n)
	for i := range b {
		b[i] = aa[r.IntN(len(aa))]
	}
	return string(b)
}

// halfMutated changes every other residue of s.
func halfMutated(s string) string {
	b := []byte(s)
	for i := 0; i < len(b); i += 2 {
		if b[i] == 'A' {
			b[i] = 'W'
		} else {
			b[i] = 'A'
		}
	}
	return string(b)
}

// annotateHarness is a predict harness with the similarity service (B's
// dataset from a generated FASTA, mmseqs behind a counting wrapper) and an
// experimental kcat table.
type annotateHarness struct {
	*predictHarness
	media, calls                      string
	train, half, unrelated, long, mid string
}

func newAnnotateHarness(t *testing.T, chem *input.Chemistry) *annotateHarness {
	t.Helper()
	real, err := exec.LookPath("mmseqs")
	if err != nil {
		testenv.Unavailable(t, "mmseqs2 is not installed (Debian package mmseqs2)")
	}
	s := testenv.OpenStore(t, store.SQLite)
	h := &annotateHarness{predictHarness: newPredictHarness(t, s, chem, "")}
	h.media = h.a.Config.MediaRoot
	r := rand.New(rand.NewPCG(1, 2))
	var fa strings.Builder
	for i := 0; i < 30; i++ {
		seq := randSeq(r, 240)
		if i == 0 {
			h.train = seq
		}
		fmt.Fprintf(&fa, ">t%d\n%s\n", i, seq)
	}
	h.half, h.unrelated, h.long = halfMutated(h.train), randSeq(r, 240), randSeq(r, 1200)
	// What method B gets of the long sequence: its first and last 500.
	h.mid = h.long[:500] + h.long[700:]
	write := func(rel, body string) {
		p := filepath.Join(h.media, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("fastas/B_sequences.fasta", fa.String())
	write("experimental/kcat_experimental.csv", "substrate_inchi,protein_sequence,protein_ID,protein_type,mutation,kcat_value,kcat_SD,temperature,ph,from_brenda,from_sabio,from_uniprot\n"+
		`"`+ethanolInChI+`",`+h.train+",P1,wildtype,,12.5,0.5,25,7.0,1,0,0\n"+
		`"`+ethanolInChI+`",`+h.long+",P2,,E5A mutant,7,,,,0,1,0\n"+
		`"`+ethanolInChI+`",`+h.mid+",P3,,,99,,,,0,0,1\n")
	h.calls = filepath.Join(t.TempDir(), "calls.log")
	wrapper := filepath.Join(t.TempDir(), "mmseqs")
	script := fmt.Sprintf("#!/bin/sh\necho \"$1\" >> %q\nexec %q \"$@\"\n", h.calls, real)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ds := []similarity.Dataset{{Label: "B", FASTA: filepath.Join(h.media, "fastas/B_sequences.fasta"), Methods: []string{"B"}}}
	h.a.Similarity = similarity.NewService(&similarity.Searcher{Root: filepath.Join(h.media, "similarity"), Mmseqs: wrapper, Threads: 1}, ds, 0)
	return h
}

func (h *annotateHarness) mmseqsRuns() int {
	data, _ := os.ReadFile(h.calls)
	return len(strings.Fields(string(data)))
}

// run submits a job with the annotation options, runs its one stage, both
// annotations and Finalize, and returns output.csv's rows.
func (h *annotateHarness) run(id, method, csvText string, useExperimental bool) ([][]string, *store.Job) {
	t := h.t
	t.Helper()
	h.submit(id, map[string]string{"kcat": method}, true, csvText)
	if err := h.a.Store.DB.Model(&store.Job{}).Where("id = ?", id).
		Updates(map[string]any{"include_similarity_columns": true, "use_experimental": useExperimental, "requested_rows": 5}).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := h.predict(id, 0); err != nil {
		t.Fatal(err)
	}
	for _, act := range []any{h.a.TrainingSimilarity, h.a.LookupExperimental} {
		if _, err := h.env.ExecuteActivity(act, JobRef{JobID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.env.ExecuteActivity(h.a.Finalize, FinalizeInput{JobID: id}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(h.media, "jobs", id, "output.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	job, err := h.a.Store.Job(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rows, job
}

func TestAnnotationsSimilarityAndExperimental(t *testing.T) {
	h := newAnnotateHarness(t, nil)
	in := "Protein Sequence,Substrate\n" +
		h.train + ",\"" + ethanolInChI + "\"\n" +
		h.half + ",CCO\n" +
		h.unrelated + ",CCO\n" +
		h.long + ",\"" + ethanolInChI + "\"\n" +
		h.mid + ",O\n"
	rows, job := h.run("jobannot1", "B", in, true)
	header := rows[0]
	wantHeader := "kcat (1/s),Source kcat,Extra Info kcat,Protein Sequence,Substrate,mean similarity to B training data,max similarity to B training data"
	if strings.Join(header, ",") != wantHeader {
		t.Fatalf("header %q", header)
	}
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("not a number: %q", s)
		}
		return v
	}
	// Similarity: exact copy 100, half-mutated about 50, unrelated 0.
	if rows[1][6] != "100.0" {
		t.Errorf("exact copy: max %q", rows[1][6])
	}
	if m := num(rows[2][6]); m < 35 || m > 65 {
		t.Errorf("half-mutated copy: max %v, want about 50", m)
	}
	if rows[3][5] != "0.0" || rows[3][6] != "0.0" {
		t.Errorf("unrelated: mean %q max %q, want 0.0", rows[3][5], rows[3][6])
	}

	// Experimental: matched by InChI and the original sequence.
	if rows[1][0] != "12.5" || rows[1][1] != "BRENDA" {
		t.Errorf("row 1: %q %q", rows[1][0], rows[1][1])
	}
	want := "This is reported in BRENDA for protein P1 (wildtype). Standard deviation is 0.5. at temperature 25.0 and pH 7.0. Prediction by Method B is 240.0"
	if rows[1][2] != want {
		t.Errorf("Extra Info\n got %q\nwant %q", rows[1][2], want)
	}
	// The long row matches on its untruncated sequence (P2), not on what
	// the model got (P3's sequence).
	if rows[4][0] != "7.0" || rows[4][1] != "Sabio-RK" || !strings.HasPrefix(rows[4][2], "This is reported in Sabio-RK for protein P2 (E5A). Standard deviation is not reported. Prediction by Method B is 1000.0") {
		t.Errorf("long row: %q", rows[4][:3])
	}
	// A SMILES substrate without RDKit cannot become InChI: no match.
	if rows[2][1] != "Prediction from Method B" {
		t.Errorf("row 2 source %q", rows[2][1])
	}
	// A skipped row keeps its reason even though (InChI, sequence) would
	// not match anyway; its similarity is still computed.
	if rows[5][0] != "" || rows[5][1] != "water is not a substrate" {
		t.Errorf("skipped row: %q", rows[5][:3])
	}
	// Four rows filled (two of them experimental), one skipped: one refunded.
	if job.RefundedRows != 1 {
		t.Errorf("refunded %d, want 1", job.RefundedRows)
	}

	// The same sequences in a second job: no mmseqs run at all.
	before := h.mmseqsRuns()
	rows2, _ := h.run("jobannot2", "B", in, false)
	if h.mmseqsRuns() != before {
		t.Errorf("the second job ran mmseqs again")
	}
	if rows2[1][6] != "100.0" || rows2[1][1] != "Prediction from Method B" {
		t.Errorf("second job row 1: %q", rows2[1])
	}
}

func TestAnnotationsNotConfigured(t *testing.T) {
	h := newAnnotateHarness(t, nil)
	// Method C has no FASTA in this media root; there is no Km table.
	h.submit("jobannot3", map[string]string{"kcat": "C"}, true, "Protein Sequence,Substrate\nMKTAYIAK,CCO\n")
	if err := h.a.Store.DB.Model(&store.Job{}).Where("id = ?", "jobannot3").
		Updates(map[string]any{"include_similarity_columns": true, "use_experimental": true}).Error; err != nil {
		t.Fatal(err)
	}
	v, err := h.env.ExecuteActivity(h.a.TrainingSimilarity, JobRef{JobID: "jobannot3"})
	if err != nil {
		t.Fatal(err)
	}
	var res AnnotationResult
	_ = v.Get(&res)
	if res.State != AnnotationNotConfigured || !strings.Contains(res.Message, "C") {
		t.Errorf("similarity: %+v", res)
	}
	if h.mmseqsRuns() != 0 {
		t.Error("mmseqs ran for a method without a dataset")
	}
	_ = os.Remove(filepath.Join(h.media, "experimental", "kcat_experimental.csv"))
	v, err = h.env.ExecuteActivity(h.a.LookupExperimental, JobRef{JobID: "jobannot3"})
	if err != nil {
		t.Fatal(err)
	}
	_ = v.Get(&res)
	if res.State != AnnotationNotConfigured {
		t.Errorf("experimental: %+v", res)
	}
	// The job says so where its user reads it: the stage's message.
	if _, err := h.env.ExecuteActivity(h.a.Finalize, FinalizeInput{JobID: "jobannot3"}); err != nil {
		t.Fatal(err)
	}
	st, err := h.a.Store.Stage(context.Background(), "jobannot3", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.Message, "Similarity columns left blank") || !strings.Contains(st.Message, "Experimental values not applied") {
		t.Errorf("stage message %q", st.Message)
	}
}

func TestExperimentalMatchesSMILESWithRDKit(t *testing.T) {
	if err := exec.Command(input.DefaultPython, "-c", "import rdkit").Run(); err != nil {
		testenv.Unavailable(t, "RDKit (Debian python3-rdkit) is not installed for %s", input.DefaultPython)
	}
	rd := input.NewRDKit(input.RDKitOptions{})
	t.Cleanup(func() { _ = rd.Close() })
	h := newAnnotateHarness(t, input.NewChemistry(rd, nil))
	in := "Protein Sequence,Substrate\n" + h.train + ",OCC\n"
	h.submit("jobannot4", map[string]string{"kcat": "B"}, true, in)
	if err := h.a.Store.DB.Model(&store.Job{}).Where("id = ?", "jobannot4").Update("use_experimental", true).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := h.env.ExecuteActivity(h.a.LookupExperimental, JobRef{JobID: "jobannot4"}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(h.media, "jobs", "jobannot4", "experimental.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"protein_ID":"P1"`) {
		t.Errorf("SMILES OCC did not match ethanol's InChI: %s", raw)
	}
}
