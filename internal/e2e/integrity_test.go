package e2e

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/testenv"
)

// engineBReads stands in for method B's program and, unlike engineB, its
// value is a function of the embedding it reads: the sum of the sequence's
// ProtT5 mean vector from the shared cache (prot_t5_last/mean_vecs), so a
// wrong cached file gives a wrong number and an unreadable one an error.
const engineBReads = `import array, hashlib, json, os, sys
a = sys.argv[1:]
inp, out = a[a.index("--input") + 1], a[a.index("--output") + 1]
job = json.load(open(inp))
media = os.environ["METHODB_MEDIA_PATH"]
preds = []
for row in job["rows"]:
    sid = hashlib.sha256(row["sequence"].encode()).hexdigest()[:12]
    raw = open(os.path.join(media, "sequence_info", "prot_t5_last", "mean_vecs", sid + ".npy"), "rb").read()
    hlen = int.from_bytes(raw[8:10], "little")
    v = array.array("f")
    v.frombytes(raw[10 + hlen:])
    assert len(v) == 1024, len(v)
    preds.append(round(sum(v), 6))
json.dump({"predictions": preds, "invalid_indices": [], "invalid_reasons": {}}, open(out, "w"))
`

// TestCorruptCachedFilesAreFoundRecomputedAndReported runs on real processes:
// after a job fills the cache, one cached file is overwritten with other
// numbers of the same shape and another is truncated. The next job with the
// same sequences finds both before the engine runs, sets them aside (kept
// under sequence_info/.quarantine), has them computed again, says so in its
// events, and completes with the same values as the first job for every row,
// intact rows included.
func TestCorruptCachedFilesAreFoundRecomputedAndReported(t *testing.T) {
	e := newEngineBJobs(t, engineBReads)
	s, media, seqs, rows := e.stack, e.media, e.seqs, e.rows
	values := func(job string) []string { t.Helper(); return e.values(t, job) }
	job1 := s.submit(rows("CCO"), []string{"kcat"}, map[string]string{"kcat": "B"})
	if st := s.waitDone(job1, 120*time.Second); st.Status != "Completed" {
		t.Fatalf("first job: %+v", st)
	}
	want := values(job1)

	f, _ := embedding.FamilyByName(embedding.FamilyProtT5LastMean)
	famDir := filepath.Join(media, "sequence_info", filepath.FromSlash(f.Name))
	path := func(i int) string { return filepath.Join(famDir, embedding.BaseSeqID(seqs[i])+".npy") }
	other := embedding.Tensor{Shape: []int{1024}, Data: make([]float32, 1024)}
	for i := range other.Data {
		other.Data[i] = -0.5
	}
	body, _ := embedding.EncodeNPY(other)
	if err := os.WriteFile(path(0), body, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path(1), 2112); err != nil {
		t.Fatal(err)
	}

	// Another substrate: new prediction units, so the engine reads the files.
	job2 := s.submit(rows("CCCO"), []string{"kcat"}, map[string]string{"kcat": "B"})
	st := s.waitDone(job2, 120*time.Second)
	if st.Status != "Completed" {
		t.Fatalf("second job: %+v", st)
	}
	if got := values(job2); !slices.Equal(got, want) {
		t.Fatalf("second job's values %v, want the first job's %v", got, want)
	}
	if r := st.reasons(); !slices.Contains(r, "cache_files_quarantined:2") {
		t.Fatalf("events %v: want cache_files_quarantined:2", r)
	}
	q, err := os.ReadDir(filepath.Join(media, "sequence_info", embedding.QuarantineDir, filepath.FromSlash(f.Name)))
	if err != nil || len(q) != 4 { // two files and their reasons
		t.Fatalf("quarantine: %v %v", q, err)
	}
	for i := range 2 {
		if err := embedding.CheckFile(path(i)); err != nil {
			t.Errorf("file %d not recomputed: %v", i, err)
		}
	}
}

// TestChangedDataDirMissesThePredictionCache runs on real processes: method
// B's command engine with a {data_dir} folder in the methods file; a second
// identical job is served from the prediction cache; after one file in the
// data folder changes in place (a model updated where it lies), the same job
// misses and the engine runs again.
func TestChangedDataDirMissesThePredictionCache(t *testing.T) {
	py := input.DefaultPython
	if _, err := os.Stat(py); err != nil {
		testenv.Unavailable(t, "the engine stand-in needs %s", py)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "b.py")
	if err := os.WriteFile(script, []byte(engineB), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	table := filepath.Join(data, "coefficients.tsv")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(table, []byte("a\t1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	methodsFile := filepath.Join(dir, "methods.yaml")
	yaml := fmt.Sprintf("methods:\n  - key: B\n    command:\n      python: %s\n      script: %s\n      paths: {data_dir: %s}\n", py, script, data)
	if err := os.WriteFile(methodsFile, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newStack(t, map[string]string{"KINFLOW_PREDICTION_ENGINE": "command", "KINFLOW_METHODS_FILE": methodsFile,
		"KINFLOW_HASH_CACHE": filepath.Join(dir, "sha256.json")}, nil)
	rows := "Protein Sequence,Substrate\nMKTAYIAKQR,CCO\nMSTNPKPQRK,CCO\n"
	if _, cs := s.runCached(t, rows); cs.Progress.PredictionsCached != 0 || cs.Progress.PredictionsMade != 2 {
		t.Fatalf("first job: %+v", cs.Progress)
	}
	if _, cs := s.runCached(t, rows); cs.Progress.PredictionsCached != 2 {
		t.Fatalf("same job again: %+v, want both from the cache", cs.Progress)
	}
	if err := os.WriteFile(table, []byte("a\t2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	_ = os.Chtimes(table, later, later)
	if _, cs := s.runCached(t, rows); cs.Progress.PredictionsCached != 0 || cs.Progress.PredictionsMade != 2 {
		t.Fatalf("after the data file changed: %+v, want the engine to run again", cs.Progress)
	}
}

// engineBOverwrites is engineBReads that first, once, plays the writer that
// changes a cached file between the plan's check and the method's read: the
// file named in $MARKER_DIR/overwrite-once is rewritten in place with other
// numbers of the same size and its modification time put back. The
// program's media path is its stage's view; the marker's folder is the
// test's, handed over in the methods file's extra_env.
const engineBOverwrites = `import os
marker = os.path.join(os.environ["MARKER_DIR"], "overwrite-once")
if os.path.exists(marker):
    target = open(marker).read().strip()
    os.remove(marker)
    st = os.stat(target)
    with open(target, "r+b") as f:
        raw = f.read()
        hlen = int.from_bytes(raw[8:10], "little")
        f.seek(10 + hlen)
        f.write(b"\x00\x00\x00\xbf" * 1024)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
` + engineBReads

// TestFileChangedBetweenCheckAndReadIsRecomputed: a cached file overwritten
// after the plan's check, as the method reads it, is caught by the cheap stat
// after the read; its rows are predicted again after the file is computed
// anew, in the same job, whose events say so, and every value is the right
// one.
func TestFileChangedBetweenCheckAndReadIsRecomputed(t *testing.T) {
	e := newEngineBJobs(t, engineBOverwrites)
	s, media, seqs, rows := e.stack, e.media, e.seqs, e.rows
	dir := filepath.Dir(media) // the engine reads $MARKER_DIR/overwrite-once
	values := func(job string) []string { t.Helper(); return e.values(t, job) }
	job1 := s.submit(rows("CCO"), []string{"kcat"}, map[string]string{"kcat": "B"})
	if st := s.waitDone(job1, 120*time.Second); st.Status != "Completed" {
		t.Fatalf("first job: %+v", st)
	}
	want := values(job1)

	f, _ := embedding.FamilyByName(embedding.FamilyProtT5LastMean)
	target := filepath.Join(media, "sequence_info", filepath.FromSlash(f.Name), embedding.BaseSeqID(seqs[1])+".npy")
	if err := os.WriteFile(filepath.Join(dir, "overwrite-once"), []byte(target), 0o644); err != nil {
		t.Fatal(err)
	}
	// Another substrate: new prediction units, so the engine reads the files.
	job2 := s.submit(rows("CCCO"), []string{"kcat"}, map[string]string{"kcat": "B"})
	st := s.waitDone(job2, 120*time.Second)
	if st.Status != "Completed" {
		t.Fatalf("second job: %+v", st)
	}
	if _, err := os.Stat(filepath.Join(dir, "overwrite-once")); !os.IsNotExist(err) {
		t.Fatalf("the engine did not play the writer: %v", err)
	}
	if got := values(job2); !slices.Equal(got, want) {
		t.Fatalf("second job's values %v, want the first job's %v", got, want)
	}
	if r := st.reasons(); !slices.Contains(r, "cache_files_changed_after_check:1") {
		t.Fatalf("events %v: want cache_files_changed_after_check:1", r)
	}
	if err := embedding.CheckFile(target); err != nil {
		t.Fatalf("the changed file was not computed again: %v", err)
	}
	// The second round (GetVersion "i34-recheck-after-read") replays.
	s.replay("prediction:"+job2, "prediction_recheck_after_read")
}

// engineBJobs is a stack whose method B is a command engine (a Python
// script) that reads the ProtT5 mean files of the shared cache, and the
// three sequences the integrity tests submit with it.
type engineBJobs struct {
	*stack
	media string
	seqs  []string
}

func newEngineBJobs(t *testing.T, script string) *engineBJobs {
	t.Helper()
	py := input.DefaultPython
	if _, err := os.Stat(py); err != nil {
		testenv.Unavailable(t, "the engine stand-in needs %s", py)
	}
	dir := t.TempDir()
	scriptPath := filepath.Join(dir, "b.py")
	if err := os.WriteFile(scriptPath, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	methodsFile := filepath.Join(dir, "methods.yaml")
	if err := os.WriteFile(methodsFile, []byte(fmt.Sprintf("methods:\n  - key: B\n    command: {python: %s, script: %s, extra_env: {MARKER_DIR: %s}}\n", py, scriptPath, dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	media := filepath.Join(dir, "media")
	return &engineBJobs{
		stack: newStack(t, map[string]string{"KINFLOW_MEDIA_ROOT": media, "KINFLOW_PREDICTION_ENGINE": "command", "KINFLOW_METHODS_FILE": methodsFile}, nil),
		media: media,
		seqs:  []string{"MKTAYIAKQRQISFVKSHFSRQ", "MSTNPKPQRKTKRNTNRRPQDVKFPGG", "MGSSHHHHHHSSGLVPRGSHM"},
	}
}

// rows is the input CSV of the three sequences with substrate.
func (e *engineBJobs) rows(substrate string) string {
	var b strings.Builder
	b.WriteString("Protein Sequence,Substrate\n")
	for _, q := range e.seqs {
		b.WriteString(q + "," + substrate + "\n")
	}
	return b.String()
}

// values is job's kcat column, one non-blank value per sequence.
func (e *engineBJobs) values(t *testing.T, job string) []string {
	t.Helper()
	recs, err := csv.NewReader(strings.NewReader(e.resultCSV(job))).ReadAll()
	if err != nil || len(recs) != len(e.seqs)+1 {
		t.Fatalf("result of %s: %v %v", job, err, recs)
	}
	col := slices.Index(recs[0], "kcat (1/s)")
	var out []string
	for _, r := range recs[1:] {
		if r[col] == "" {
			t.Fatalf("result of %s has a blank value: %v", job, recs)
		}
		out = append(out, r[col])
	}
	return out
}

// engineBFlipFlops is engineBReads played by a writer that, once, changes
// a cached file in place just before the method reads it and puts its old
// bytes and modification time back just after: the file looks untouched
// by the time the job checks it again, its contents the recorded ones.
const engineBFlipFlops = `import os
marker = os.path.join(os.environ["MARKER_DIR"], "flip-flop-once")
saved = None
if os.path.exists(marker):
    target = open(marker).read().strip()
    os.remove(marker)
    st = os.stat(target)
    with open(target, "r+b") as f:
        saved = f.read()
        hlen = int.from_bytes(saved[8:10], "little")
        f.seek(10 + hlen)
        f.write(b"\x00\x00\x00\xbf" * 1024)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
` + engineBReads + `
if saved is not None:
    with open(target, "r+b") as f:
        f.write(saved)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
`

// TestFlipFlopAroundTheReadIsCaught: a cached file changed before the
// method reads it and put back after is not served: its contents are the
// recorded ones again when the job checks, but its change time moved
// while the method read it, so the rows that used it are predicted again
// and every value is the right one.
func TestFlipFlopAroundTheReadIsCaught(t *testing.T) {
	e := newEngineBJobs(t, engineBFlipFlops)
	s, media, seqs, rows := e.stack, e.media, e.seqs, e.rows
	dir := filepath.Dir(media)
	job1 := s.submit(rows("CCO"), []string{"kcat"}, map[string]string{"kcat": "B"})
	if st := s.waitDone(job1, 120*time.Second); st.Status != "Completed" {
		t.Fatalf("first job: %+v", st)
	}
	want := e.values(t, job1)
	f, _ := embedding.FamilyByName(embedding.FamilyProtT5LastMean)
	target := filepath.Join(media, "sequence_info", filepath.FromSlash(f.Name), embedding.BaseSeqID(seqs[1])+".npy")
	if err := os.WriteFile(filepath.Join(dir, "flip-flop-once"), []byte(target), 0o644); err != nil {
		t.Fatal(err)
	}
	job2 := s.submit(rows("CCCO"), []string{"kcat"}, map[string]string{"kcat": "B"})
	st := s.waitDone(job2, 120*time.Second)
	if st.Status != "Completed" {
		t.Fatalf("second job: %+v", st)
	}
	if _, err := os.Stat(filepath.Join(dir, "flip-flop-once")); !os.IsNotExist(err) {
		t.Fatalf("the engine did not play the writer: %v", err)
	}
	if got := e.values(t, job2); !slices.Equal(got, want) {
		t.Fatalf("second job's values %v, want the first job's %v", got, want)
	}
	if r := st.reasons(); !slices.Contains(r, "cache_files_changed_after_check:1") {
		t.Fatalf("events %v: want cache_files_changed_after_check:1", r)
	}
	if err := embedding.CheckFile(target); err != nil {
		t.Fatalf("the file, put back as it was, is not intact: %v", err)
	}
}
