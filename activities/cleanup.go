package activities

import (
	"context"
	"errors"
	"io/fs"
	"os"
)

// Cleanup removes the ephemeral artefacts (SEED-SPEC §2.5; §5.2 F, G, I) this
// stage consumed, except those another running job still claims. It also
// drops their manifest entries' files only: a manifest entry whose file is
// gone is never trusted by the planner.
func (a *Activities) Cleanup(ctx context.Context, ref StageRef) error {
	removed, err := a.Store.ReleaseArtefacts(ctx, ref.JobID, ref.StageIndex, func(path string) error {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if removed > 0 {
		a.Log.Info("removed ephemeral artefacts", "job_id", ref.JobID, "stage", ref.StageIndex, "step", "cleanup", "files", removed)
	}
	return nil
}
