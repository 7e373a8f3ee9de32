package activities

import (
	"path/filepath"

	"github.com/kinflow/kinflow/internal/fsutil"
)

// StageCounts is MEDIA/jobs/<id>/work/stage-<i>/counts.json: a stage's size
// in the user's units, written by BuildPlan for the API's progress
// (`overall` in /status/): the distinct sequences the stage embeds, the
// rows it was handed and its prediction units. Embedding progress is
// counted in files; the API turns it into sequences with these counts.
type StageCounts struct {
	Rows      int `json:"rows"`
	Sequences int `json:"sequences"`
	Units     int `json:"units"`
}

// StageCountsFile is the file's name in the stage's folder.
const StageCountsFile = "counts.json"

// writeStageCounts records sr's counts; rewriting the same counts on a
// retry is harmless (atomic write, same content).
func (a *Activities) writeStageCounts(jobID string, index int, sr stageRows) error {
	dir, err := a.stageDir(jobID, index)
	if err != nil {
		return err
	}
	c := StageCounts{Rows: len(sr.Shapes)}
	seen := map[string]bool{}
	for _, u := range sr.Units {
		if u.Skip != "" {
			continue
		}
		c.Units++
		if u.Seq != "" && !seen[u.Seq] {
			seen[u.Seq] = true
			c.Sequences++
		}
	}
	return fsutil.WriteJSONAtomic(filepath.Join(dir, StageCountsFile), c)
}
