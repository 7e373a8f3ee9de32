// Package jobfiles is the one home of a job folder's layout and the types
// of the files in it (MEDIA/jobs/<id>/…): the job-id patterns, the paths,
// and rows.json, pred.json, pred.partial.json, counts.json,
// similarity.json and experimental.json. The activities write and read
// them; the api reads them for progress and notes.
package jobfiles

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
)

// SlugPattern is the slug pattern of the job id path segment, as the
// reference deployment's routes have it; the api answers anything else like an unknown route.
var SlugPattern = regexp.MustCompile(`^[-a-zA-Z0-9_]+$`)

// folderIDPattern is the shape of a job id a folder is built from: a slug
// of at most 64 characters (ids are generated; this bounds a path built
// from a stored id).
var folderIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Names of the files in a job's folder and in a stage's folder.
const (
	InputFile        = "input.csv"
	OutputFile       = "output.csv"
	SimilarityFile   = "similarity.json"
	ExperimentalFile = "experimental.json"
	RowsFile         = "rows.json"
	PredFile         = "pred.json"
	PartialFile      = "pred.partial.json"
	CountsFile       = "counts.json"
	PlanFile         = "plan.json"
	ProvenanceFile   = "provenance.json"
)

// Dir is MEDIA/jobs/<id>; an id that is not a folder id is an error.
func Dir(mediaRoot, jobID string) (string, error) {
	if !folderIDPattern.MatchString(jobID) {
		return "", fmt.Errorf("invalid job id %q", jobID)
	}
	return filepath.Join(mediaRoot, "jobs", jobID), nil
}

// StageDir is MEDIA/jobs/<id>/work/stage-<i>: the stage's plan, work
// file, predictions and engine files.
func StageDir(mediaRoot, jobID string, index int) (string, error) {
	d, err := Dir(mediaRoot, jobID)
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "work", "stage-"+strconv.Itoa(index)), nil
}

// StagePlanGlob is the glob of every stage's plan.json of a job.
func StagePlanGlob(mediaRoot, jobID string) string {
	return filepath.Join(mediaRoot, "jobs", jobID, "work", "stage-*", PlanFile)
}

// DirRel is the job's folder relative to MEDIA.
func DirRel(jobID string) string {
	return "jobs/" + jobID
}

// InputRel is input.csv's path relative to MEDIA, as the job row stores it.
func InputRel(jobID string) string {
	return DirRel(jobID) + "/" + InputFile
}

// OutputRel is output.csv's path relative to MEDIA, as the job row
// stores it.
func OutputRel(jobID string) string {
	return DirRel(jobID) + "/" + OutputFile
}
