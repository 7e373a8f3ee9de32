package activities

import (
	"path/filepath"

	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/jobfiles"
)

// StageCounts is a stage's counts.json (internal/jobfiles).
type StageCounts = jobfiles.StageCounts

// StageCountsFile is the file's name in the stage's folder.
const StageCountsFile = jobfiles.CountsFile

// writeStageCounts records sr's counts; rewriting the same counts on a
// retry is harmless (atomic write, same content).
func (a *Activities) writeStageCounts(jobID string, index int, sr jobfiles.StageRows) error {
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
