package embedjob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/stepserver"
)

const testStep = "methodd_esm1b"

// seqOfLen is a valid sequence of n residues, distinct per tag.
func seqOfLen(n int, tag int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteByte(aminoAcids[(i*7+tag)%len(aminoAcids)])
	}
	return b.String()
}

type fixture struct {
	media    string
	settings *Settings
	layout   EmbeddingLayout
	record   string
}

func newFixture(t *testing.T, budget int, fakeArgs ...string) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{media: filepath.Join(dir, "media"), record: filepath.Join(dir, "batches.txt")}
	f.layout = testLayout(t, f.media)
	argv := append([]string{os.Args[0], "{manifest_file}", "record=" + f.record}, fakeArgs...)
	f.settings = &Settings{
		Commands:          map[string][]string{testStep: argv},
		ToksPerBatch:      budget,
		StepToksPerBatch:  map[string]int{},
		MaxResidues:       map[string]int{testStep: 1022},
		JobLogDir:         filepath.Join(dir, "logs"),
		ScratchDir:        filepath.Join(dir, "scratch"),
		ErrorLogTailLines: 120,
		ProgramEnv:        append(os.Environ(), stepProgramEnv+"=1"),
	}
	return f
}

// testLayout is the artefact layout on media.
func testLayout(t *testing.T, media string) EmbeddingLayout {
	t.Helper()
	l, err := embedding.NewLayout(media, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	return EmbeddingLayout{L: l}
}

func (f *fixture) engine() *Engine {
	return &Engine{Runner: &CommandRunner{Settings: f.settings, MediaRoot: f.media}, Settings: f.settings, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// items makes one SeqItem per length, ids s00, s01, … .
func (f *fixture) items(t *testing.T, lengths ...int) []SeqItem {
	t.Helper()
	var out []SeqItem
	for i, n := range lengths {
		id := fmt.Sprintf("s%02d", i)
		paths, err := f.layout.ExpectedPaths(testStep, id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, SeqItem{SeqID: id, Sequence: seqOfLen(n, i), Outputs: paths})
	}
	return out
}

func (f *fixture) path(id string) string {
	return filepath.Join(f.media, "sequence_info", "esm1b_methodd", id+".npy")
}

func (f *fixture) run(t *testing.T, items []SeqItem) StepOutcome {
	t.Helper()
	out, err := f.engine().RunStep(context.Background(), StepRequest{JobID: strings.Repeat("a", 32), StepKey: testStep, Seqs: items})
	if err != nil {
		t.Fatalf("RunStep: %v", err)
	}
	return out
}

// batches reads the record file: one []string of "id:len" per batch run.
func (f *fixture) batches(t *testing.T) [][]string {
	t.Helper()
	data, err := os.ReadFile(f.record)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		out = append(out, strings.Split(l, ","))
	}
	return out
}

func missingIDs(ms []MissingFile) []string {
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.SeqID)
	}
	return ids
}

func TestCommandWritesAllFilesAndSkipsExisting(t *testing.T) {
	f := newFixture(t, 100000)
	items := f.items(t, 50, 60, 70, 80)
	if err := writeNPY(f.path("s01"), 4); err != nil {
		t.Fatal(err)
	}
	out := f.run(t, items)
	if out.Failure != nil || len(out.Missing) != 0 {
		t.Fatalf("failure %v, missing %v", out.Failure, out.Missing)
	}
	if out.Requested != 4 || out.Skipped != 1 || out.Existing != 1 || out.Written != 3 || out.Batches != 1 {
		t.Fatalf("outcome %+v", out)
	}
	for _, id := range []string{"s00", "s01", "s02", "s03"} {
		if err := embedding.CheckFile(f.path(id)); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	b := f.batches(t)
	if len(b) != 1 || slices.ContainsFunc(b[0], func(s string) bool { return strings.HasPrefix(s, "s01:") }) {
		t.Fatalf("the existing sequence was sent again: %v", b)
	}
	// A second run finds everything and runs no program.
	out = f.run(t, items)
	if out.Skipped != 4 || out.Batches != 0 || out.Written != 0 {
		t.Fatalf("second run %+v", out)
	}
}

func TestCommandOmittedFileIsReported(t *testing.T) {
	f := newFixture(t, 100000, "omit=s02")
	out := f.run(t, f.items(t, 50, 60, 70, 80))
	if out.Failure != nil {
		t.Fatalf("a program that exits 0 is not a failure: %v", out.Failure)
	}
	if len(out.Missing) != 1 || out.Missing[0].SeqID != "s02" || out.Missing[0].Path != f.path("s02") ||
		!strings.Contains(out.Missing[0].Reason, "not written") {
		t.Fatalf("missing %+v", out.Missing)
	}
	if got := FormatMissing(out.Missing); !slices.Equal(got, []string{"s02: " + f.path("s02")}) {
		t.Fatalf("FormatMissing %v", got)
	}
	if out.Written != 3 {
		t.Fatalf("written %d", out.Written)
	}
}

func TestCommandCrashReportsExactlyTheUnwrittenFiles(t *testing.T) {
	f := newFixture(t, 100000, "crash")
	// One batch, longest first: s03 is written, then the program dies.
	out := f.run(t, f.items(t, 50, 60, 70, 80))
	if out.Failure == nil || !strings.Contains(out.Failure.Error(), "exit 3") {
		t.Fatalf("failure %v", out.Failure)
	}
	if got := missingIDs(out.Missing); !slices.Equal(got, []string{"s00", "s01", "s02"}) {
		t.Fatalf("missing %v", got)
	}
	if out.Written != 1 || embedding.CheckFile(f.path("s03")) != nil {
		t.Fatalf("the file committed before the crash must count: %+v", out)
	}
	for _, m := range out.Missing {
		if !strings.Contains(m.Reason, "step program failed") {
			t.Errorf("reason %q", m.Reason)
		}
	}
}

func TestCommandMalformedOutputIsRemovedAndReported(t *testing.T) {
	f := newFixture(t, 100000, "malformed=s01")
	out := f.run(t, f.items(t, 50, 60))
	if got := missingIDs(out.Missing); !slices.Equal(got, []string{"s01"}) || !strings.Contains(out.Missing[0].Reason, "malformed") {
		t.Fatalf("missing %+v", out.Missing)
	}
	if _, err := os.Stat(f.path("s01")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("malformed file left in the cache: %v", err)
	}
}

func TestCommandOOMSplitsBatchesDownToWhatFits(t *testing.T) {
	for _, mode := range []string{"oom-above=2", "oom-exit-above=2", "cuda-oom-above=2"} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t, 100000, mode)
			out := f.run(t, f.items(t, 10, 20, 30, 40, 50, 60, 70))
			if out.Failure != nil || len(out.Missing) != 0 || out.Written != 7 {
				t.Fatalf("outcome %+v", out)
			}
			var sizes []int
			for _, b := range f.batches(t) {
				sizes = append(sizes, len(b))
			}
			// 7 → OOM → 3 (OOM → 1, 2) and 4 (OOM → 2, 2).
			if want := []int{7, 3, 1, 2, 4, 2, 2}; !slices.Equal(sizes, want) {
				t.Fatalf("batch sizes %v, want %v", sizes, want)
			}
			if out.Batches != 7 {
				t.Fatalf("batches %d", out.Batches)
			}
		})
	}
}

func TestCommandOOMOnOneSequenceIsReportedNotRetriedForEver(t *testing.T) {
	f := newFixture(t, 100000, "oom-seq=s02")
	out := f.run(t, f.items(t, 10, 20, 30, 40))
	if out.Failure != nil {
		t.Fatalf("an OOM on one sequence is not a retryable failure: %v", out.Failure)
	}
	if len(out.Missing) != 1 || out.Missing[0].SeqID != "s02" || !strings.Contains(out.Missing[0].Reason, "out of memory on a single sequence") {
		t.Fatalf("missing %+v", out.Missing)
	}
	if out.Written != 3 {
		t.Fatalf("written %d", out.Written)
	}
	// [s03 s02 s01 s00] → [s03 s02] → [s03] ok, [s02] OOM; [s01 s00] ok.
	n := 0
	for _, b := range f.batches(t) {
		if slices.ContainsFunc(b, func(s string) bool { return strings.HasPrefix(s, "s02:") }) {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("s02 was tried %d times, want 3 (4-batch, 2-batch, alone)", n)
	}
}

func TestCommandBatchesRespectTokenBudget(t *testing.T) {
	const budget = 300
	f := newFixture(t, budget)
	lengths := []int{120, 30, 90, 60, 10, 250, 75, 75, 40, 140, 20, 5}
	out := f.run(t, f.items(t, lengths...))
	if out.Written != len(lengths) || len(out.Missing) != 0 {
		t.Fatalf("outcome %+v", out)
	}
	prevMax := 1 << 30
	seen := 0
	for _, b := range f.batches(t) {
		maxLen := 0
		for i, e := range b {
			var n int
			fmt.Sscanf(e[strings.IndexByte(e, ':')+1:], "%d", &n)
			if i == 0 {
				maxLen = n
			} else if n > maxLen {
				t.Fatalf("batch %v not longest first", b)
			}
		}
		if cost := (maxLen + ExtraTokensPerSeq) * len(b); cost > budget && len(b) > 1 {
			t.Fatalf("batch %v costs %d tokens > budget %d", b, cost, budget)
		}
		if maxLen > prevMax {
			t.Fatalf("batches not in longest-first order")
		}
		prevMax = maxLen
		seen += len(b)
	}
	if seen != len(lengths) {
		t.Fatalf("%d sequences sent, want %d", seen, len(lengths))
	}
}

func TestPackBatchesProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		budget := 50 + r.IntN(3000)
		maxSeqs := r.IntN(5)
		var items []SeqItem
		for i := 0; i < r.IntN(60); i++ {
			items = append(items, SeqItem{SeqID: fmt.Sprintf("x%03d", i), Sequence: strings.Repeat("A", 1+r.IntN(1500))})
		}
		bs := PackBatches(items, budget, maxSeqs)
		seen := map[string]bool{}
		prev := 1 << 30
		for _, b := range bs {
			if len(b) == 0 {
				t.Fatal("empty batch")
			}
			if len(b) > 1 && BatchCost(b) > budget {
				t.Fatalf("batch of %d costs %d > %d", len(b), BatchCost(b), budget)
			}
			if maxSeqs > 0 && len(b) > maxSeqs {
				t.Fatalf("batch of %d > max %d", len(b), maxSeqs)
			}
			for _, it := range b {
				if len(it.Sequence) > prev {
					t.Fatal("not sorted longest first")
				}
				prev = len(it.Sequence)
				if seen[it.SeqID] {
					t.Fatalf("%s packed twice", it.SeqID)
				}
				seen[it.SeqID] = true
			}
		}
		if len(seen) != len(items) {
			t.Fatalf("%d of %d items packed", len(seen), len(items))
		}
	}
}

func TestLongSequenceRule(t *testing.T) {
	long := seqOfLen(1500, 3)
	got := TruncateLong(long, 1022)
	if got != long[:500]+long[1000:] || len(got) != 1000 {
		t.Fatalf("1500 residues → %d", len(got))
	}
	if s := seqOfLen(1022, 1); TruncateLong(s, 1022) != s {
		t.Fatal("1022 residues must pass as they are")
	}
	if s := seqOfLen(1023, 1); len(TruncateLong(s, 1022)) != 1000 {
		t.Fatal("1023 residues must be cut")
	}
	if s := seqOfLen(5000, 1); TruncateLong(s, 0) != s {
		t.Fatal("no limit: unchanged")
	}
	if s := seqOfLen(900, 1); TruncateLong(s, 801) != s[:400]+s[500:] {
		t.Fatal("limit below 1000: first and last ⌊max/2⌋")
	}

	// Through the engine: the program never sees the long sequence.
	f := newFixture(t, 100000)
	out := f.run(t, f.items(t, 1500, 1022, 100))
	if out.Written != 3 {
		t.Fatalf("outcome %+v", out)
	}
	b := f.batches(t)
	if len(b) != 1 || !slices.Equal(b[0], []string{"s01:1022", "s00:1000", "s02:100"}) {
		t.Fatalf("program saw %v", b)
	}
}

func TestShellStepProgramGetsPlaceholders(t *testing.T) {
	f := newFixture(t, 100000)
	dir := t.TempDir()
	script := filepath.Join(dir, "step.sh")
	args := filepath.Join(dir, "args.txt")
	// A shell program that records its arguments and map file, writes one
	// of its two files (a real NPY header) and exits 0.
	body := `#!/bin/sh
printf '%s\n' "$@" > ` + args + `
cat "$4" >> ` + args + `
mkdir -p "$(dirname "$6")"
printf '\223NUMPY\001\000\166\000' > "$6"
printf "{'descr': '<f4', 'fortran_order': False, 'shape': (1280,), }" >> "$6"
printf '%*s\n' 57 '' >> "$6"
head -c 5120 /dev/zero >> "$6"
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	f.settings.Commands[testStep], _ = SplitCommand(script + ` {step_key} "{seq_ids}" {seq_count} {seq_id_to_seq_file} {job_id} ` + f.path("s01") + ` 'a b'`)
	out := f.run(t, f.items(t, 20, 30))
	if got := missingIDs(out.Missing); !slices.Equal(got, []string{"s00"}) {
		t.Fatalf("missing %v (%+v)", got, out)
	}
	data, _ := os.ReadFile(args)
	lines := strings.Split(string(data), "\n")
	want := []string{testStep, "s01,s00", "2"}
	if !slices.Equal(lines[:3], want) || lines[4] != strings.Repeat("a", 32) || lines[6] != "a b" {
		t.Fatalf("arguments %q", lines)
	}
	if !strings.Contains(string(data), `"s00":"`+seqOfLen(20, 0)+`"`) {
		t.Fatalf("map file not passed: %s", data)
	}
}

func TestCommandCancellationStopsTheProgram(t *testing.T) {
	f := newFixture(t, 100000, "sleep=30s")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	_, err := f.engine().RunStep(ctx, StepRequest{JobID: strings.Repeat("b", 32), StepKey: testStep, Seqs: f.items(t, 10)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("cancellation took %v", d)
	}
}

func TestCommandMissingForStepWithoutCommand(t *testing.T) {
	f := newFixture(t, 100000)
	delete(f.settings.Commands, testStep)
	out := f.run(t, f.items(t, 10))
	var ce *ConfigError
	if !errors.As(out.Failure, &ce) || !strings.Contains(ce.Msg, "GPU_EMBED_STEP_CMD_METHODD_ESM1B") {
		t.Fatalf("failure %v", out.Failure)
	}
}

// TestSyntheticServerWritesWellFormedFiles runs the synthetic executor as
// the production path does: a resident step server (this test binary, as
// `step-server --synthetic`) started by the pool, one per step.
func TestSyntheticServerWritesWellFormedFiles(t *testing.T) {
	media := t.TempDir()
	l := testLayout(t, media)
	st := &Settings{ToksPerBatch: DefaultToksPerBatch, MaxResidues: map[string]int{}, ProgramEnv: os.Environ()}
	pool := stepserver.NewPool(stepserver.Options{Max: 2})
	defer pool.Close()
	runner, err := newSyntheticServerRunner(st, media, pool)
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{Runner: runner, Settings: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, step := range []string{"methoda_t5_full", "methodg_esm2", "methodf_esm1v", "prot_t5_mean"} {
		paths, err := l.ExpectedPaths(step, "abc123")
		if err != nil {
			t.Fatal(err)
		}
		out, err := e.RunStep(context.Background(), StepRequest{JobID: strings.Repeat("c", 32), StepKey: step,
			Seqs: []SeqItem{{SeqID: "abc123", Sequence: seqOfLen(40, 1), Outputs: paths}}})
		if err != nil || len(out.Missing) != 0 || out.Written+out.Existing != len(paths) {
			t.Fatalf("%s: %v %+v", step, err, out)
		}
		for _, p := range paths {
			if err := embedding.CheckFile(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Four steps through a pool of two: servers were evicted and started
	// again, and each says it is synthetic.
	running := 0
	for _, s := range pool.Status() {
		if s.PID == 0 {
			continue
		}
		running++
		if s.Ready["synthetic"] != true {
			t.Fatalf("server %+v does not say it is synthetic", s)
		}
	}
	if running != 2 {
		t.Fatalf("%d servers running, want the pool's maximum of 2: %+v", running, pool.Status())
	}
}

func BenchmarkPackBatches10k(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	items := make([]SeqItem, 10000)
	for i := range items {
		items[i] = SeqItem{SeqID: fmt.Sprintf("x%05d", i), Sequence: strings.Repeat("A", 50+r.IntN(1000))}
	}
	b.ReportAllocs()
	for b.Loop() {
		PackBatches(items, DefaultToksPerBatch, 0)
	}
}

// TestHostNeverRecutsWhatTheProgramCuts: with the default settings the host
// hands method D's step program a 1,030-residue sequence as it is, so the
// program's own rule (TurNup: the first 1,022 residues) decides, never the
// host's first 500 + last 500 (docs/method-cuts.md).
func TestHostNeverRecutsWhatTheProgramCuts(t *testing.T) {
	f := newFixture(t, 100000)
	f.settings.MaxResidues = map[string]int{}
	for k, v := range DefaultMaxResidues {
		f.settings.MaxResidues[k] = v
	}
	out := f.run(t, f.items(t, 1030, 1, 1023))
	if out.Written != 3 {
		t.Fatalf("outcome %+v", out)
	}
	if b := f.batches(t); len(b) != 1 || !slices.Equal(b[0], []string{"s00:1030", "s02:1023", "s01:1"}) {
		t.Fatalf("program saw %v", b)
	}
}

// TestSyntheticServerWritesUnderTheReferenceFolders: the synthetic step
// server takes the folder naming from the manifest's folders (it builds no
// folder of its own), so a reference-named host gets method G's tensor in
// omniesi_esm2/ and method D's vector in esm1b_turnup/.
func TestSyntheticServerWritesUnderTheReferenceFolders(t *testing.T) {
	media := t.TempDir()
	l := testLayout(t, media)
	l.L.Folders = embedding.FoldersReference
	st := &Settings{ToksPerBatch: DefaultToksPerBatch, MaxResidues: map[string]int{}, ProgramEnv: os.Environ()}
	pool := stepserver.NewPool(stepserver.Options{Max: 2})
	defer pool.Close()
	runner, err := newSyntheticServerRunner(st, media, pool)
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{Runner: runner, Settings: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Layout: l.L}
	for step, folder := range map[string]string{"methodg_esm2": "omniesi_esm2", "methodd_esm1b": "esm1b_turnup"} {
		paths, err := l.ExpectedPaths(step, "abc123")
		if err != nil {
			t.Fatal(err)
		}
		if len(paths) != 1 || filepath.Base(filepath.Dir(paths[0])) != folder {
			t.Fatalf("%s: expected %v, want under %s", step, paths, folder)
		}
		out, err := e.RunStep(context.Background(), StepRequest{JobID: strings.Repeat("c", 32), StepKey: step,
			Seqs: []SeqItem{{SeqID: "abc123", Sequence: seqOfLen(40, 1), Outputs: paths}}})
		if err != nil || len(out.Missing) != 0 || out.Written != 1 {
			t.Fatalf("%s: %v %+v", step, err, out)
		}
		if err := embedding.CheckFile(paths[0]); err != nil {
			t.Fatal(err)
		}
	}
	for _, kinflow := range []string{"methodg_esm2", "esm1b_methodd"} {
		if _, err := os.Stat(filepath.Join(media, "sequence_info", kinflow)); !os.IsNotExist(err) {
			t.Errorf("the kinflow folder %s was written: %v", kinflow, err)
		}
	}
}
