package embedjob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/heartbeat"
	"github.com/kinflow/kinflow/internal/stepserver"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
)

// StepProgress is a step activity's heartbeat detail.
type StepProgress struct {
	FilesDone  int `json:"files_done"`
	FilesTotal int `json:"files_total"`
}

// heartbeatGrace is how long a step runs before its batches' progress is
// sent as heartbeats. The ticker (heartbeat.Interval, a third of the
// heartbeat timeout at most) keeps a live step alive whatever the grace.
const heartbeatGrace = time.Second

// Activities are the GPU step activities and their dependencies. One method,
// RunStep, is registered once per active step key, under the key's name.
type Activities struct {
	Engine *Engine
	Layout Layout
	Logs   *JobLogs
	Log    *slog.Logger
	// Known records the jobs this host has worked on (for /health counts);
	// may be nil.
	Known *Registry
	// Servers are the resident step servers (nil when none can run).
	Servers *stepserver.Pool
}

// Close stops the resident step servers (stdin closed, then SIGTERM, then
// SIGKILL to their process groups).
func (a *Activities) Close() {
	if a.Servers != nil {
		a.Servers.Close()
	}
}

// Register registers RunStep under every active step key.
func (a *Activities) Register(r worker.ActivityRegistry) {
	for _, k := range ActiveSteps {
		r.RegisterActivityWithOptions(a.RunStep, activity.RegisterOptions{Name: k})
	}
}

// RunStep runs one step of an EmbedJob: the step is the activity's type name.
// It reads its seq ids and sequences from the work file, skips sequences
// whose files exist, runs the rest in batches, heartbeats with the files
// done, and reports every expected file still missing. Files missing after
// every batch ran to completion are reported in StepResult.Missing with a nil
// error; a crashed program is a retryable StepFailed error (a retry redoes
// only the missing files).
func (a *Activities) RunStep(ctx context.Context, in StepInput) (StepResult, error) {
	info := activity.GetInfo(ctx)
	step, ok := CanonicalStep(info.ActivityType.Name)
	if !ok {
		return StepResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("activity type %q is not a step key", info.ActivityType.Name), ErrTypeInvalidStepInput, nil)
	}
	if in.StepKey != "" {
		if c, _ := CanonicalStep(in.StepKey); c != step {
			return StepResult{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("step input names %q but the activity is %q", in.StepKey, step), ErrTypeInvalidStepInput, nil)
		}
	}
	res := StepResult{StepKey: step}
	// A GPU job id (32 hex) or the CPU worker's "local-<job id>": it names
	// the step log file, so it must be a safe file name.
	if err := CheckSeqID(in.GPUJobID); err != nil {
		return res, temporal.NewNonRetryableApplicationError("invalid job id: "+err.Error(), ErrTypeInvalidStepInput, nil)
	}
	log := a.Log.With("job_id", in.GPUJobID, "step", step, "attempt", info.Attempt)
	if err := a.checkFolders(in.CacheFolders); err != nil {
		log.Error("step refused", "error", err)
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeStepConfig, nil)
	}
	if a.Known != nil {
		a.Known.Add(in.GPUJobID)
	}
	if in.Shards > 1 && (in.Shard < 0 || in.Shard >= in.Shards) {
		return res, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("shard %d of %d does not exist", in.Shard, in.Shards), ErrTypeInvalidStepInput, nil)
	}
	seqs, method, err := a.stepSeqs(in.WorkFile, step, in.Shard, in.Shards)
	log = log.With("method", method)
	if in.Shards > 1 {
		log = log.With("shard", fmt.Sprintf("%d/%d", in.Shard+1, in.Shards))
	}
	if err != nil {
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidStepInput, nil)
	}
	res.Requested = len(seqs)

	jl, err := a.Logs.Open(in.GPUJobID)
	if err != nil {
		log.Warn("open job log", "error", err)
		jl = nil
	}
	defer jl.Close()
	if !a.Logs.Contains(in.GPUJobID, "JOB_START ") {
		jl.Printf("JOB_START job_id=%s", in.GPUJobID)
	}
	var prev StepProgress
	if activity.HasHeartbeatDetails(ctx) && activity.GetHeartbeatDetails(ctx, &prev) == nil {
		log.Info("step resumes after a retry", "files_done_before", prev.FilesDone)
		jl.Printf("STEP_RESUME job_id=%s step=%s attempt=%d files_done_before=%d", in.GPUJobID, step, info.Attempt, prev.FilesDone)
	}
	jl.Printf("STEP_START job_id=%s step=%s seq_count=%d executor=%s", in.GPUJobID, step, len(seqs), a.Engine.Runner.Name())
	log.Info("step started", "seq_count", len(seqs))

	// Heartbeat on every batch and on a ticker in between, but not in the
	// step's first heartbeatGrace: a small step ends before then, and its
	// one heartbeat (the SDK sends the first at once) was a Temporal
	// round trip and a workflow update per job for nothing.
	progress := make(chan StepProgress, 1)
	hbCtx, stopHB := context.WithCancel(ctx)
	hbDone := make(chan struct{})
	began := time.Now()
	go func() {
		defer close(hbDone)
		t := time.NewTicker(heartbeat.Interval(info.HeartbeatTimeout))
		defer t.Stop()
		var last StepProgress
		for {
			select {
			case <-hbCtx.Done():
				return
			case p := <-progress:
				last = p
				if time.Since(began) >= heartbeatGrace {
					activity.RecordHeartbeat(ctx, last)
				}
			case <-t.C:
				activity.RecordHeartbeat(ctx, last)
			}
		}
	}()
	prio := activity.GetInfo(ctx).Priority
	out, err := a.Engine.RunStep(ctx, StepRequest{
		JobID: in.GPUJobID, StepKey: step, Seqs: seqs, Log: jl,
		Share: Share{Key: prio.FairnessKey, Weight: float64(prio.FairnessWeight)},
		Progress: func(done, total int) {
			p := StepProgress{FilesDone: done, FilesTotal: total}
			select {
			case progress <- p:
			default:
				select {
				case <-progress:
				default:
				}
				progress <- p
			}
		},
	})
	stopHB()
	<-hbDone
	res.Existing, res.Written = out.Existing, out.Written
	a.summarizeMissing(&res, in.GPUJobID, out.Missing, log)
	if err != nil {
		jl.Printf("STEP_FAILED job_id=%s step=%s error=%v", in.GPUJobID, step, err)
		log.Warn("step stopped", "error", err)
		return res, err
	}
	for _, m := range out.Missing {
		jl.Printf("STEP_MISSING job_id=%s step=%s seq_id=%s path=%s reason=%s", in.GPUJobID, step, m.SeqID, m.Path, m.Reason)
	}
	if out.Failure != nil {
		var ce *ConfigError
		msg := fmt.Sprintf("step %s: %v; %d of %d files missing: %s; worker log: %s",
			step, out.Failure, len(out.Missing), res.Existing+res.Written+len(out.Missing), describeMissing(out.Missing, 20), a.Logs.Path(in.GPUJobID))
		jl.Printf("STEP_FAILED job_id=%s step=%s error=%s", in.GPUJobID, step, msg)
		log.Warn("step failed", "error", out.Failure, "missing", len(out.Missing))
		if errors.As(out.Failure, &ce) {
			return res, temporal.NewNonRetryableApplicationError(msg, ErrTypeStepConfig, out.Failure, res)
		}
		return res, temporal.NewApplicationErrorWithCause(msg, ErrTypeStepFailed, out.Failure, res)
	}
	jl.Printf("STEP_DONE job_id=%s step=%s written=%d existing=%d missing=%d batches=%d", in.GPUJobID, step, res.Written, res.Existing, res.MissingFiles, out.Batches)
	log.Info("step done", "written", res.Written, "existing", res.Existing, "missing", res.MissingFiles, "batches", out.Batches)
	return res, nil
}

// checkFolders refuses a step whose submitter names the cache folders
// otherwise than this host (KINFLOW_CACHE_FOLDERS): the host would write its
// files where the submitter never looks.
func (a *Activities) checkFolders(theirs string) error {
	want, err := embedding.ParseFolders(theirs)
	if err != nil {
		return err
	}
	if have := a.Engine.layout().Naming(); want != have {
		return fmt.Errorf("cache folder naming mismatch: the job was submitted with KINFLOW_CACHE_FOLDERS=%s, this host has KINFLOW_CACHE_FOLDERS=%s; set the same value on every process that shares the cache", want, have)
	}
	return nil
}

// summarizeMissing fills res's bounded account of the missing files: counts,
// a sample, and the full list in a file beside the job's log (the history
// carries only what is bounded, MissingSampleSize).
func (a *Activities) summarizeMissing(res *StepResult, jobID string, ms []MissingFile, log *slog.Logger) {
	res.MissingFiles = len(ms)
	seqs := map[string]bool{}
	for _, m := range ms {
		seqs[m.SeqID] = true
	}
	res.MissingSeqs = len(seqs)
	res.MissingSample = FormatMissing(ms[:min(len(ms), MissingSampleSize)])
	if len(ms) == 0 {
		return
	}
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%s: %s: %s\n", m.SeqID, m.Path, m.Reason)
	}
	p := a.Logs.MissingPath(jobID, res.StepKey)
	if err := fsutil.WriteFileAtomic(p, []byte(b.String()), 0o644); err != nil {
		log.Warn("write the missing-file list", "error", err)
		return
	}
	res.MissingList = p
}

// stepSeqs reads the work file and returns step's sequences (from step_work
// entries whose key maps to step) with their expected outputs: all of them,
// or shard of shards (ShardOf over the seq ids in sorted order).
func (a *Activities) stepSeqs(workFile, step string, shard, shards int) (_ []SeqItem, method string, err error) {
	w, err := ReadWorkFile(workFile)
	if err != nil {
		return nil, "", err
	}
	method = w.MethodKey
	seen := map[string]bool{}
	var all []string
	for key, ids := range w.StepWork {
		if c, _ := CanonicalStep(key); c != step {
			continue
		}
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			if _, ok := w.SeqIDToSeq[id]; !ok {
				return nil, method, fmt.Errorf("work file %s: seq_id %s of step %s has no sequence", workFile, id, key)
			}
			all = append(all, id)
		}
	}
	sort.Strings(all)
	var out []SeqItem
	for _, id := range ShardOf(all, shard, shards) {
		seq := w.SeqIDToSeq[id]
		if err := CheckSequence(seq); err != nil {
			return nil, method, fmt.Errorf("work file %s: seq_id %s: %w", workFile, id, err)
		}
		paths, err := a.Layout.ExpectedPaths(step, id)
		if err != nil {
			return nil, method, fmt.Errorf("expected files of %s for %s: %w", step, id, err)
		}
		out = append(out, SeqItem{SeqID: id, Sequence: seq, Outputs: paths})
	}
	return out, method, nil
}

// ReadWorkFile reads a Work JSON file.
func ReadWorkFile(path string) (*Work, error) {
	if path == "" {
		return nil, errors.New("no work file")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read work file: %w", err)
	}
	var w Work
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("parse work file %s: %w", path, err)
	}
	return &w, nil
}
