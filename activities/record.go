package activities

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/kinflow/kinflow/internal/store"
)

// keepEvents is how many gpuPrecompute events a job keeps: its status shows
// the last 20.
const keepEvents = 20

// RecordEvent stores one gpuPrecompute transition of a stage.
func (a *Activities) RecordEvent(ctx context.Context, ev Event) error {
	if ev.MethodKey == "" || ev.Target == "" {
		st, err := a.Store.Stage(ctx, ev.JobID, ev.StageIndex)
		if err != nil {
			return err
		}
		ev.MethodKey, ev.Target = st.MethodKey, st.Target
	}
	row := &store.JobEvent{
		JobID: ev.JobID, StageIndex: ev.StageIndex, Kind: store.EventGPUPrecompute,
		MethodKey: ev.MethodKey, Target: ev.Target,
		Attempted: ev.Attempted, UsedGPU: ev.UsedGPU, Completed: ev.Completed, Failed: ev.Failed,
		Reason: ev.Reason, Message: ev.Message, CreatedAt: time.Now().UTC(), Key: ev.Key,
	}
	stored, err := a.Store.AddEvent(ctx, row, keepEvents)
	if err != nil || !stored {
		return err
	}
	a.Log.Info("gpu_precompute", "job_id", ev.JobID, "stage", ev.StageIndex, "method", ev.MethodKey, "target", ev.Target, "step", "gpu_precompute", "reason", ev.Reason, "message", ev.Message)
	a.Metrics.GPUEvent(ev.Reason)
	return nil
}

// MarkStage sets a stage's status and mirrors its counters into the job's,
// which the next stage's start overwrites.
func (a *Activities) MarkStage(ctx context.Context, m StageMark) error {
	now := time.Now().UTC()
	cols := map[string]any{"status": m.Status}
	// The conditions are the row's own, in the UPDATE (which sees the row
	// as it was): no read of the stage first.
	switch m.Status {
	case "running":
		// A running mark after the first only updates the embedding state.
		cols["started_at"] = gorm.Expr("CASE WHEN status = 'running' AND started_at IS NOT NULL THEN started_at ELSE ? END", now)
	case "completed":
		cols["completed_at"] = now
		// When the stage completes, an enabled embedding still pending or
		// running becomes done.
		cols["embedding_state"] = gorm.Expr("CASE WHEN embedding_enabled AND embedding_state IN ('', 'pending', 'running') THEN 'done' ELSE embedding_state END")
	case "failed":
		cols["completed_at"] = now
		cols["message"] = m.Message
	}
	if m.EmbeddingState != "" {
		cols["embedding_state"] = m.EmbeddingState
		if m.EmbeddingState == "not_required" {
			cols["embedding_enabled"] = false
		}
	}
	return a.Store.UpdateStage(ctx, m.JobID, m.StageIndex, cols)
}
