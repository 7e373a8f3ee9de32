package jobfiles

import (
	"path/filepath"

	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/units"
)

// StageRows is MEDIA/jobs/<id>/work/stage-<i>/rows.json: how the stage
// expanded every input row (units.Row: candidates, substrate tokens, skip
// reason) and the stage's prediction units (internal/units) in row order.
// One file per stage, so BuildPlan and Predict read only their own stage.
type StageRows struct {
	Index     int    `json:"index"`
	Target    string `json:"target"`
	MethodKey string `json:"method_key"`
	// Shapes has one entry per input row.
	Shapes []units.Row `json:"shapes"`
	// Units are the stage's prediction units, grouped by row in row order.
	Units []units.Unit `json:"units"`
	// Inputs are, per row, the lists and engine arguments its shared
	// units send (units.ShareInputs): stored once per row, not once per
	// candidate. nil for a stage with none.
	Inputs []*units.RowInput `json:"inputs,omitempty"`
	// CandidateMode: some row of the job has several candidate sequences
	// (every row's Extra Info is then the per-candidate array).
	CandidateMode bool `json:"candidate_mode,omitempty"`
	// Legacy is the one-row-per-unit form written before units existed;
	// ReadStageRows converts it (a job prepared by an older worker).
	Legacy []PreparedRow `json:"rows,omitempty"`
}

// PreparedRow is one input row as a stage saw it before prediction units
// (read only, for jobs prepared by an older worker).
type PreparedRow struct {
	Seq    string            `json:"seq,omitempty"`
	Kwargs map[string]string `json:"kwargs,omitempty"`
	Reason string            `json:"reason,omitempty"`
}

// SequenceReason reports whether a skip reason is about the row's
// sequence: such a row is blanked in every target; every other reason
// blanks only its own target, so one target's failure never costs another
// its values.
func SequenceReason(reason string) bool {
	switch reason {
	case input.ReasonInvalidProtein, input.SkipTooLong, units.MissingSequence:
		return true
	}
	return false
}

// ReadStageRows reads the stage's rows.json in stageDir whole, with its
// shared inputs restored into the units and an older worker's per-row form
// converted. A missing file is an error that wraps os.ErrNotExist.
func ReadStageRows(stageDir string) (StageRows, error) {
	var sr StageRows
	if err := fsutil.ReadJSON(filepath.Join(stageDir, RowsFile), &sr); err != nil {
		return StageRows{}, err
	}
	units.RestoreInputs(sr.Inputs, sr.Units)
	sr.Inputs = nil
	if sr.Shapes == nil && sr.Legacy != nil {
		// Prepared before units: one unit per valid row.
		sr.Shapes = make([]units.Row, len(sr.Legacy))
		for r, pr := range sr.Legacy {
			sr.Shapes[r] = units.Row{Candidates: []units.Candidate{{Sequence: pr.Seq, Skip: pr.Reason}}, Skip: pr.Reason, SequenceSkip: SequenceReason(pr.Reason)}
			if pr.Reason == "" {
				sr.Units = append(sr.Units, units.Unit{Row: r, Target: sr.Target, Substrate: -1, Seq: pr.Seq, Kwargs: pr.Kwargs})
			}
		}
		sr.Legacy = nil
	}
	return sr, nil
}

// ReadStageRowsLite reads the stage's rows.json for the result: the
// reductions need each unit's row, candidate and substrate, not the
// sequence sent or the engine arguments, which are most of the file (a
// 10,000-row job with three substrates per row has 33,000 units per stage).
func ReadStageRowsLite(stageDir string) (StageRows, error) {
	var lite struct {
		StageRows
		Units []struct {
			Row        int      `json:"row"`
			Candidate  int      `json:"candidate"`
			Substrate  int      `json:"substrate"`
			Substrates []string `json:"substrates"`
			Skip       string   `json:"skip"`
			Shared     bool     `json:"shared"`
		} `json:"units"`
	}
	if err := fsutil.ReadJSON(filepath.Join(stageDir, RowsFile), &lite); err != nil {
		return StageRows{}, err
	}
	if lite.Shapes == nil && lite.Legacy != nil {
		// An older worker's per-row file: the full reader converts it.
		return ReadStageRows(stageDir)
	}
	sr := lite.StageRows
	sr.Units = make([]units.Unit, len(lite.Units))
	for i, u := range lite.Units {
		sr.Units[i] = units.Unit{Row: u.Row, Target: sr.Target, Candidate: u.Candidate, Substrate: u.Substrate, Substrates: u.Substrates, Skip: u.Skip, Shared: u.Shared}
	}
	units.RestoreInputs(sr.Inputs, sr.Units)
	sr.Inputs = nil
	return sr, nil
}

// StagePredictions is MEDIA/jobs/<id>/work/stage-<i>/pred.json: one
// result per prediction unit of the stage (rows.json's Units, same order).
type StagePredictions struct {
	Results []units.Result `json:"results"`
	// Values and Reasons are the per-row form written before units (one
	// unit per valid row); Upgrade converts them.
	Values  []*float64 `json:"values,omitempty"`
	Reasons []string   `json:"reasons,omitempty"`
	// Source is the Source cell of a predicted unit.
	Source    string `json:"source"`
	Synthetic bool   `json:"synthetic"`
}

// Upgrade fills p.Results from the per-row form an older worker wrote
// (one unit per valid row), and reports whether p matches sr's units.
func (p *StagePredictions) Upgrade(sr StageRows) bool {
	if p.Results == nil && len(p.Values) == len(sr.Shapes) {
		p.Results = make([]units.Result, len(sr.Units))
		for i, u := range sr.Units {
			if v := p.Values[u.Row]; v != nil {
				p.Results[i] = units.Result{Value: v, Source: p.Source}
			} else if p.Reasons[u.Row] != "" {
				p.Results[i].Error = p.Reasons[u.Row]
			}
		}
	}
	return p.Results != nil && len(p.Results) == len(sr.Units)
}

// StagePartial is pred.partial.json: a stage's results so far when cached
// files changed while the method read them, and the units to run again
// once those files are computed anew.
type StagePartial struct {
	Results []units.Result `json:"results"`
	Redo    []int          `json:"redo"`
}

// StageCounts is a stage's size in the user's units, recorded by BuildPlan
// for the API's progress (`overall` in /status/): the distinct sequences the
// stage embeds, the rows it was handed and its prediction units. Embedding
// progress is counted in files; the API turns it into sequences with these
// counts. BuildPlan records them in the stage's row (store.JobStage's
// Count* columns); workers from before that wrote them to
// MEDIA/jobs/<id>/work/stage-<i>/counts.json, which ReadStageCounts reads.
type StageCounts struct {
	Rows      int `json:"rows"`
	Sequences int `json:"sequences"`
	Units     int `json:"units"`
}

// ReadStageCounts reads a stage's counts.json.
func ReadStageCounts(mediaRoot, jobID string, index int) (StageCounts, error) {
	var c StageCounts
	dir, err := StageDir(mediaRoot, jobID, index)
	if err != nil {
		return c, err
	}
	err = fsutil.ReadJSON(filepath.Join(dir, CountsFile), &c)
	return c, err
}
