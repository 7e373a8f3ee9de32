package embedjob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/stepserver"
	"github.com/kinflow/kinflow/internal/testenv"
)

// realStep runs on kinflow's own step server (steps/, fair-esm's ESM-2).
const realStep = "methodh_esm2_last_mean"

// realBudget packs two or three of realItems' sequences (at most 60
// residues) per batch, so that a dozen sequences make several batches.
const realBudget = 128

// realHost is a GPU host whose step runs on the real step server, on the
// CPU, with the tiny random-weight models of steps/tests.
type realHost struct {
	py     string
	models []string
}

func newRealHost(t testing.TB) *realHost {
	t.Helper()
	py := testenv.StepsPython(t)
	return &realHost{py: py, models: testenv.TinyModels(t, py)}
}

// engine is an engine on media whose pool keeps ahead batches in flight to
// the server; env is added to the server's environment.
func (h *realHost) engine(t testing.TB, media string, ahead int, env ...string) *Engine {
	t.Helper()
	progEnv := append(append(os.Environ(), h.models...), "KINFLOW_STEPS_DEVICE=cpu", "OMP_NUM_THREADS=1")
	st := &Settings{
		Servers:           map[string][]string{realStep: {h.py, "-m", "kinflow_steps", "--step", realStep}, benchStep: {h.py, "-m", "kinflow_steps", "--step", benchStep}},
		ToksPerBatch:      realBudget,
		StepToksPerBatch:  map[string]int{},
		MaxResidues:       map[string]int{},
		JobLogDir:         filepath.Join(media, "logs"),
		ScratchDir:        t.TempDir(),
		ErrorLogTailLines: 120,
		ProgramEnv:        append(progEnv, env...),
		Pool:              stepserver.Options{Ahead: ahead},
	}
	pool := stepserver.NewPool(stepserver.Options{Ahead: ahead, KillGrace: 5 * time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(pool.Close)
	return &Engine{Runner: &CommandRunner{Settings: st, MediaRoot: media, Pool: pool}, Settings: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// realItems are n random protein sequences of 20 to 60 residues with their
// outputs under media.
func realItems(t testing.TB, media string, n int) []SeqItem {
	t.Helper()
	return realItemsOf(t, media, realStep, "r", n)
}

// realItemsOf is realItems for step, with ids prefix00, prefix01, ….
func realItemsOf(t testing.TB, media, step, prefix string, n int) []SeqItem {
	t.Helper()
	l, err := embedding.NewLayout(media, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(32, 7))
	const amino = "ACDEFGHIKLMNPQRSTVWY"
	var out []SeqItem
	for i := range n {
		b := make([]byte, 20+rng.IntN(41))
		for j := range b {
			b[j] = amino[rng.IntN(len(amino))]
		}
		id := fmt.Sprintf("%s%02d", prefix, i)
		paths, err := EmbeddingLayout{L: l}.ExpectedPaths(step, id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, SeqItem{SeqID: id, Sequence: string(b), Outputs: paths})
	}
	return out
}

// runReal runs the step for items; it returns the outcome and the job log.
func runReal(t testing.TB, e *Engine, items []SeqItem) (StepOutcome, string) {
	t.Helper()
	return runRealStep(t, e, realStep, items)
}

// runRealStep is runReal for step.
func runRealStep(t testing.TB, e *Engine, step string, items []SeqItem) (StepOutcome, string) {
	t.Helper()
	logs := &JobLogs{Dir: e.Settings.JobLogDir}
	job := strings.Repeat("c", 32)
	jl, err := logs.Open(job)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := e.RunStep(ctx, StepRequest{JobID: job, StepKey: step, Seqs: items, Log: jl})
	jl.Close()
	if err != nil {
		t.Fatalf("RunStep: %v", err)
	}
	data, err := os.ReadFile(logs.Path(job))
	if err != nil {
		t.Fatal(err)
	}
	return out, string(data)
}

// serverEvents are the server's "batch N: received" and "batch N: wrote"
// lines, in the order it wrote them (one stderr stream).
var serverEvent = regexp.MustCompile(`kinflow-steps: batch (\d+): (received|wrote)`)

type event struct {
	batch int
	what  string
}

func serverEvents(log string) []event {
	var out []event
	for _, m := range serverEvent.FindAllStringSubmatch(log, -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, event{n, m[2]})
	}
	return out
}

// overlap is the most batches the server held at once: for each batch
// whose "wrote" line is in the log (written, answer next), the batches
// already received then. The server's stderr reaches the log of the oldest
// batch in flight, so a "wrote" line read after its answer, with no batch
// left in flight, goes to the pool's log instead: such a batch is skipped.
func overlap(evs []event) int {
	received := map[int]int{}
	for i, e := range evs {
		if e.what == "received" {
			received[e.batch] = i
		}
	}
	most := 0
	for i, e := range evs {
		if e.what != "wrote" {
			continue
		}
		held := 0
		for b, at := range received {
			if b >= e.batch && at < i {
				held++
			}
		}
		most = max(most, held)
	}
	return most
}

// readVec reads one mean file.
func readVec(t *testing.T, path string) []float32 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := embedding.DecodeNPY(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v.Data
}

// sameValues fails unless got holds want's numbers (to float32 rounding).
func sameValues(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-5*(1+math.Abs(float64(want[i]))) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestRealServerSendsAhead: the GPU host's step run on the real step server
// with two batches ahead: the server has received batch n+1 before it
// writes (and answers) batch n, never more than two at once, every answer
// settles its own batch in order, and the files hold the numbers of a run
// that sends one batch at a time (which never overlaps).
func TestRealServerSendsAhead(t *testing.T) {
	h := newRealHost(t)
	serial, ahead := t.TempDir(), t.TempDir()

	out1, log1 := runReal(t, h.engine(t, serial, 1), realItems(t, serial, 12))
	if out1.Failure != nil || out1.Written != 12 || out1.Batches < 4 {
		t.Fatalf("one at a time: %+v", out1)
	}
	if n := overlap(serverEvents(log1)); n != 1 {
		t.Fatalf("one at a time: the server had %d batches at once:\n%s", n, log1)
	}

	out2, log2 := runReal(t, h.engine(t, ahead, 2), realItems(t, ahead, 12))
	if out2.Failure != nil || out2.Written != 12 || out2.Batches != out1.Batches {
		t.Fatalf("ahead: %+v", out2)
	}
	evs := serverEvents(log2)
	if n := overlap(evs); n != 2 {
		t.Fatalf("ahead 2: the server had at most %d batches at once, want 2:\n%s", n, log2)
	}
	// Answers settle their own batches, in the order sent.
	done := regexp.MustCompile(`BATCH_DONE job_id=\w+ step=\w+ batch=(\d+) missing=0`).FindAllStringSubmatch(log2, -1)
	if len(done) != out2.Batches {
		t.Fatalf("%d batches done, want %d:\n%s", len(done), out2.Batches, log2)
	}
	for i, m := range done {
		if m[1] != strconv.Itoa(i+1) {
			t.Fatalf("batch %s settled in place %d:\n%s", m[1], i+1, log2)
		}
	}
	for _, it := range realItems(t, ahead, 12) {
		sameValues(t, it.SeqID, readVec(t, it.Outputs[0]), readVec(t, strings.Replace(it.Outputs[0], ahead, serial, 1)))
	}
}

// TestRealServerKilledWithBatchesInFlight: a step server that SIGKILLs
// itself part-way through the write protocol (KINFLOW_STEPS_TEST_KILL_AT)
// while three batches are in flight: every batch in flight fails, the ones
// that may have been bystanders get one more try, the run reports what is
// missing, every file a later job would use is whole, recorded and holds
// the right numbers, and a run without the kill completes the step.
func TestRealServerKilledWithBatchesInFlight(t *testing.T) {
	h := newRealHost(t)
	ref, media := t.TempDir(), t.TempDir()
	if out, _ := runReal(t, h.engine(t, ref, 1), realItems(t, ref, 12)); out.Failure != nil || out.Written != 12 {
		t.Fatalf("reference run: %+v", out)
	}

	// A batch of two sequences passes 5 points (two files staged, one
	// manifest merge, two renames): each server dies in its second batch.
	out, log := runReal(t, h.engine(t, media, 3, "KINFLOW_STEPS_TEST_KILL_AT=7"), realItems(t, media, 12))
	if out.Failure == nil || len(out.Missing) == 0 || out.Written+len(out.Missing) != 12 {
		t.Fatalf("killed run: %+v", out)
	}
	if !strings.Contains(log, "BATCH_RETRY") || !strings.Contains(log, "batches were in flight") {
		t.Fatalf("no batch was retried after the server died with batches in flight:\n%s", log)
	}
	checkUsable(t, media, ref)

	again, _ := runReal(t, h.engine(t, media, 3), realItems(t, media, 12))
	if again.Failure != nil || again.Written != len(out.Missing) || again.Existing != out.Written {
		t.Fatalf("run after the kill: %+v (the killed run wrote %d)", again, out.Written)
	}
	if n := checkUsable(t, media, ref); n != 12 {
		t.Fatalf("%d usable files, want 12", n)
	}
}

// checkUsable checks every visible file of the step's family under media:
// well-formed, recorded in its folder's manifest with its size and SHA-256,
// and holding the numbers of the same sequence's file under ref. It returns
// how many there are.
func checkUsable(t *testing.T, media, ref string) int {
	t.Helper()
	dir := filepath.Dir(realItems(t, media, 1)[0].Outputs[0])
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	records := embedding.ReadManifest(dir)
	n := 0
	for _, de := range entries {
		name := de.Name()
		if strings.HasPrefix(name, ".") || name == embedding.ManifestName {
			continue
		}
		p := filepath.Join(dir, name)
		if err := embedding.CheckFile(p); err != nil {
			t.Fatalf("visible file %s: %v", p, err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		rec, ok := records[strings.TrimSuffix(name, filepath.Ext(name))]
		if !ok || rec.Bytes != int64(len(data)) || rec.SHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("visible file %s: record %+v does not match it", p, rec)
		}
		sameValues(t, name, readVec(t, p), readVec(t, strings.Replace(p, media, ref, 1)))
		n++
	}
	return n
}

// benchStep writes method G's residue tensors ([L, D] per sequence), the
// family with the most host work per token (bigger files to check, hash and
// record), as steps/bench.py's CPU overlap figure does.
const benchStep = "methodg_esm2"

// BenchmarkRealServerAhead is the Go host's side of the CPU overlap figure
// (make bench; docs/BENCHMARKS.md, "The pipelined step server"): whole step runs of 300
// sequences of 20 to 60 residues (budget 1,024 tokens: 14 batches) on the
// real step server with the tiny ESM-2 on one CPU thread (OMP_NUM_THREADS=1,
// the stand-in for the device), one batch at a time against
// KINFLOW_STEP_SERVER_AHEAD batches in flight, in tokens per second. The
// server is warm (loaded before the timer) and pipelined
// (KINFLOW_STEPS_PIPELINE_DEPTH 3) in every case.
func BenchmarkRealServerAhead(b *testing.B) {
	h := newRealHost(b)
	for _, ahead := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("ahead=%d", ahead), func(b *testing.B) {
			media := b.TempDir()
			e := h.engine(b, media, ahead)
			e.Settings.ToksPerBatch = 1024
			// Load the model before the timer.
			if out, _ := runRealStep(b, e, benchStep, realItemsOf(b, media, benchStep, "w", 2)); out.Failure != nil {
				b.Fatal(out.Failure)
			}
			tokens := 0
			b.ResetTimer()
			for i := range b.N {
				items := realItemsOf(b, media, benchStep, fmt.Sprintf("b%dn", i), 300)
				for _, it := range items {
					tokens += len(it.Sequence) + ExtraTokensPerSeq
				}
				out, _ := runRealStep(b, e, benchStep, items)
				if out.Failure != nil || out.Written != len(items) {
					b.Fatalf("%+v", out)
				}
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
