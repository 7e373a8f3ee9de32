package activities

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
)

// jobIDPattern is the slug shape of job ids (WIRE §1.0); a job folder is
// built only from an id that matches it.
var jobIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// jobDir is MEDIA/jobs/<id>.
func (a *Activities) jobDir(jobID string) (string, error) {
	if !jobIDPattern.MatchString(jobID) {
		return "", fmt.Errorf("invalid job id %q", jobID)
	}
	return filepath.Join(a.Config.MediaRoot, "jobs", jobID), nil
}

// stageDir is MEDIA/jobs/<id>/work/stage-<i>: the stage's plan, work file,
// predictions and engine files.
func (a *Activities) stageDir(jobID string, index int) (string, error) {
	d, err := a.jobDir(jobID)
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "work", "stage-"+strconv.Itoa(index)), nil
}
