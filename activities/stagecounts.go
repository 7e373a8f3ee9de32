package activities

import (
	"context"

	"github.com/kinflow/kinflow/internal/jobfiles"
)

// StageCounts is a stage's counts (internal/jobfiles).
type StageCounts = jobfiles.StageCounts

// sentSeqs are sr's distinct sequences among the units it sends, in order:
// a sequence shared by rows, substrates or candidates is planned (and
// embedded) once; skipped units count nowhere.
func sentSeqs(sr jobfiles.StageRows) []string {
	var seqs []string
	seen := map[string]bool{}
	for _, u := range sr.Units {
		if u.Skip == "" && u.Seq != "" && !seen[u.Seq] {
			seen[u.Seq] = true
			seqs = append(seqs, u.Seq)
		}
	}
	return seqs
}

// stageCounts counts sr, whose sent sequences are seqs (sentSeqs): its
// rows, the units it sends, and the distinct sequences among them.
func stageCounts(sr jobfiles.StageRows, seqs []string) StageCounts {
	c := StageCounts{Rows: len(sr.Shapes), Sequences: len(seqs)}
	for _, u := range sr.Units {
		if u.Skip == "" {
			c.Units++
		}
	}
	return c
}

// stageCountCols are c as the stage row's columns. The first plan records
// them in the UPDATE it makes anyway; they used to be a counts.json file
// beside the stage's work files, one more file per stage to create and
// make durable. Recording the same counts again on a retry is
// harmless.
func stageCountCols(c StageCounts) map[string]any {
	return map[string]any{"count_rows": c.Rows, "count_units": c.Units, "count_sequences": c.Sequences}
}

// recordStageCounts records c in the stage's row alone: for a plan that
// makes no other write to it.
func (a *Activities) recordStageCounts(ctx context.Context, in PlanInput, c StageCounts) error {
	return a.Store.UpdateStage(ctx, in.JobID, in.StageIndex, stageCountCols(c))
}
