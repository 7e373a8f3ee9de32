package activities

import "github.com/kinflow/kinflow/internal/jobfiles"

// jobDir is MEDIA/jobs/<id> (internal/jobfiles).
func (a *Activities) jobDir(jobID string) (string, error) {
	return jobfiles.Dir(a.Config.MediaRoot, jobID)
}

// stageDir is MEDIA/jobs/<id>/work/stage-<i>: the stage's plan, work file,
// predictions and engine files.
func (a *Activities) stageDir(jobID string, index int) (string, error) {
	return jobfiles.StageDir(a.Config.MediaRoot, jobID, index)
}
