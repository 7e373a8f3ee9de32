package activities

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"

	"github.com/kinflow/kinflow/internal/store"
)

// Cleanup removes the ephemeral artefacts (the families of methods F, G and
// I, which live only until the prediction that reads them) this stage consumed, except those another running job still claims. It also
// drops their manifest entries' files only: a manifest entry whose file is
// gone is never trusted by the planner.
//
// Methods that share an ephemeral family within one job (G and G-O2 read
// the same methodg_esm2 files) clean up once, after the last of
// them: an earlier stage keeps its claims, and the last releases its own and
// theirs, so the files are not deleted and computed again between them.
func (a *Activities) Cleanup(ctx context.Context, ref StageRef) error {
	// The stage's view of the media root (view.go), left when the worker
	// died while its program ran: links and copies only.
	if v, err := a.stageViewDir(ref.JobID, ref.StageIndex); err == nil {
		if err := os.RemoveAll(v); err != nil {
			return err
		}
	}
	release := []int{ref.StageIndex}
	if stages, err := a.Store.JobStages(ctx, ref.JobID); err == nil {
		fams := a.ephemeralOf(stages, ref.StageIndex)
		if len(fams) > 0 {
			for _, st := range stages {
				shares := slices.ContainsFunc(a.ephemeralOf(stages, st.Index), func(f string) bool { return slices.Contains(fams, f) })
				switch {
				case st.Index > ref.StageIndex && shares:
					return nil // a later stage of this job reads the same files
				case st.Index < ref.StageIndex && shares:
					release = append(release, st.Index)
				}
			}
		}
	}
	removed := 0
	for _, stage := range release {
		n, err := a.Store.ReleaseArtefacts(ctx, ref.JobID, stage, func(path string) error {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		})
		if err != nil {
			return err
		}
		removed += n
	}
	if removed > 0 {
		a.Log.Info("removed ephemeral artefacts", "job_id", ref.JobID, "stage", ref.StageIndex, "step", "cleanup", "files", removed)
	}
	return nil
}

// ephemeralOf is the ephemeral families of the method of stage index.
func (a *Activities) ephemeralOf(stages []store.JobStage, index int) []string {
	for _, st := range stages {
		if st.Index == index {
			if d, ok := a.Catalogue.Get(st.MethodKey); ok {
				return d.EphemeralFamilies
			}
		}
	}
	return nil
}
