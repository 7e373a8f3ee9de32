package activities

import (
	"context"
	"time"

	"github.com/kinflow/kinflow/internal/store"
)

// keepEvents is how many gpuPrecompute events a job keeps (WIRE §2.5: the
// last 20).
const keepEvents = 20

// RecordEvent stores one gpuPrecompute transition of a stage.
func (a *Activities) RecordEvent(ctx context.Context, ev Event) error {
	st, err := a.Store.Stage(ctx, ev.JobID, ev.StageIndex)
	if err != nil {
		return err
	}
	row := &store.JobEvent{
		JobID: ev.JobID, StageIndex: ev.StageIndex, Kind: store.EventGPUPrecompute,
		MethodKey: st.MethodKey, Target: st.Target,
		Attempted: ev.Attempted, UsedGPU: ev.UsedGPU, Completed: ev.Completed, Failed: ev.Failed,
		Reason: ev.Reason, Message: ev.Message, CreatedAt: time.Now().UTC(), Key: ev.Key,
	}
	stored, err := a.Store.AddEvent(ctx, row, keepEvents)
	if err != nil || !stored {
		return err
	}
	a.Log.Info("gpu_precompute", "job_id", ev.JobID, "stage", ev.StageIndex, "method", st.MethodKey, "target", st.Target, "step", "gpu_precompute", "reason", ev.Reason, "message", ev.Message)
	a.Metrics.GPUEvent(ev.Reason)
	return nil
}

// MarkStage sets a stage's status and the job's counters mirror (WIRE §2.3).
func (a *Activities) MarkStage(ctx context.Context, m StageMark) error {
	now := time.Now().UTC()
	cols := map[string]any{"status": m.Status}
	switch m.Status {
	case "running":
		cols["started_at"] = now
	case "completed":
		cols["completed_at"] = now
		// When the stage completes, an enabled embedding still pending or
		// running becomes done (WIRE §2.3).
		st, err := a.Store.Stage(ctx, m.JobID, m.StageIndex)
		if err != nil {
			return err
		}
		if st.EmbeddingEnabled && (st.EmbeddingState == "" || st.EmbeddingState == "pending" || st.EmbeddingState == "running") {
			cols["embedding_state"] = "done"
		}
	case "failed":
		cols["completed_at"] = now
		cols["message"] = m.Message
	}
	if m.Status == "running" {
		// A running mark after the first only updates the embedding state.
		st, err := a.Store.Stage(ctx, m.JobID, m.StageIndex)
		if err != nil {
			return err
		}
		if st.Status == "running" && st.StartedAt != nil {
			delete(cols, "started_at")
		}
	}
	if m.EmbeddingState != "" {
		cols["embedding_state"] = m.EmbeddingState
		if m.EmbeddingState == "not_required" {
			cols["embedding_enabled"] = false
		}
	}
	return a.Store.UpdateStage(ctx, m.JobID, m.StageIndex, cols)
}
