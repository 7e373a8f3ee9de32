package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/progress"
)

// trackHeartbeat is how often TrackProgress heartbeats: well inside the
// shortest heartbeat timeout (KINFLOW_HEARTBEAT_TIMEOUT_SECONDS, 5 s in
// tests), and how quickly it notices the workflow's cancellation.
const trackHeartbeat = time.Second

// TrackProgress counts the stage's missing files as they appear and stores
// the count (internal/progress: fsnotify plus periodic reconciliation), until
// every file is there or the workflow cancels it. A tracker already running
// for the same job stage in this worker is reused; after a restart a new one
// resumes from the files on disk (the files are the truth).
//
// It waits for as long as its stage's embedding phase runs, so it never
// shares a pool with the work it watches: it runs on the trackers' own task
// queue (config.TrackTaskQueue, KINFLOW_TRACK_SLOTS slots), no step of any job waits
// for it, and the workflow stops it without waiting for its answer
// (docs/workflows.md, "Slot pools and waits"). A full tracker pool delays
// live progress only; it cannot hold back a job.
func (a *Activities) TrackProgress(ctx context.Context, in TrackInput) error {
	var plan struct {
		Missing map[string][]string `json:"missing_paths_by_seq"`
	}
	if err := fsutil.ReadJSON(in.PlanFile, &plan); err != nil {
		return err
	}
	var paths []string
	for _, ps := range plan.Missing {
		paths = append(paths, ps...)
	}
	log := a.Log.With("job_id", in.JobID, "stage", in.StageIndex, "step", "track")
	if st, err := a.Store.Stage(ctx, in.JobID, in.StageIndex); err == nil {
		log = log.With("method", st.MethodKey, "target", st.Target)
	}
	opts := progress.Options{
		Key:   progress.Key{JobID: in.JobID, Stage: in.StageIndex},
		Paths: paths,
		// Written with every other tracker's count of this worker, in one
		// transaction per interval (progressbatch.go).
		Store: func(_ context.Context, computed int) error {
			a.progress().set(in.JobID, in.StageIndex, computed)
			return nil
		},
		OnFound:  func(src progress.Source, n int) { a.Metrics.TrackerFound(string(src), n) },
		Log:      log,
		NoNotify: a.Config.ProgressNoNotify,
	}
	tr, reused := a.trackers().Acquire(opts)
	defer tr.Release()
	log.Info("tracking embedding progress", "need", tr.Need(), "reused", reused)
	tick := time.NewTicker(trackHeartbeat)
	defer tick.Stop()
	for {
		activity.RecordHeartbeat(ctx, tr.Computed())
		select {
		case <-tr.Done():
			if err := tr.Err(); err != nil {
				return err
			}
			log.Info("embedding progress tracked", "computed", tr.Computed(), "need", tr.Need(), "complete", tr.Complete())
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
