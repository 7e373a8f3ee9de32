package jobfiles

import (
	"path/filepath"

	"github.com/kinflow/kinflow/internal/experimental"
	"github.com/kinflow/kinflow/internal/fsutil"
)

// Annotation states, as written in similarity.json / experimental.json and
// returned to the workflow (they show in the Temporal UI).
const (
	AnnotationDone          = "done"
	AnnotationNotRequested  = "not_requested"
	AnnotationNotConfigured = "not_configured"
)

// Similarity is MEDIA/jobs/<id>/similarity.json: the kcat method's
// similarity columns, one entry per input row (null for an empty sequence).
type Similarity struct {
	State   string     `json:"state"`
	Message string     `json:"message,omitempty"`
	Method  string     `json:"method"`
	Dataset string     `json:"dataset,omitempty"`
	Max     []*float64 `json:"max,omitempty"`
	Mean    []*float64 `json:"mean,omitempty"`
	// CandMax and CandMean are, for a row whose cell lists candidate
	// sequences, each candidate's values (null outside the 20
	// amino acids); the result shows the selected candidate's. Nil for a
	// row with one sequence.
	CandMax  [][]*float64 `json:"cand_max,omitempty"`
	CandMean [][]*float64 `json:"cand_mean,omitempty"`
}

// Experimental is MEDIA/jobs/<id>/experimental.json: per target, the
// matched table row of each input row that has one.
type Experimental struct {
	Targets map[string]ExperimentalTarget `json:"targets"`
}

// ExperimentalTarget is one target's look-up in experimental.json.
type ExperimentalTarget struct {
	State   string                      `json:"state"`
	Message string                      `json:"message,omitempty"`
	Rows    map[int]experimental.Record `json:"rows,omitempty"`
}

// Annotations are what the result reads back from the two files; absent or
// unreadable files leave the cells as they are.
type Annotations struct {
	Sim Similarity
	Exp Experimental
}

// ReadAnnotations reads the job folder's similarity.json and
// experimental.json; a file that is absent or unreadable counts as not
// written (its cells stay as the prediction left them).
func ReadAnnotations(jobDir string) Annotations {
	var an Annotations
	_ = fsutil.ReadJSON(filepath.Join(jobDir, SimilarityFile), &an.Sim)
	_ = fsutil.ReadJSON(filepath.Join(jobDir, ExperimentalFile), &an.Exp)
	return an
}

// SimilarityCells are row r's (mean, max) similarity cells; selected is
// the candidate whose kcat the row shows (-1: none), used for a row with
// candidate sequences.
func (an Annotations) SimilarityCells(r, selected int) (string, string) {
	if an.Sim.State == AnnotationDone && r < len(an.Sim.CandMax) && an.Sim.CandMax[r] != nil {
		if selected < 0 || selected >= len(an.Sim.CandMax[r]) || an.Sim.CandMax[r][selected] == nil {
			return "", ""
		}
		return experimental.FormatFloat(*an.Sim.CandMean[r][selected]), experimental.FormatFloat(*an.Sim.CandMax[r][selected])
	}
	if an.Sim.State != AnnotationDone || r >= len(an.Sim.Max) || an.Sim.Max[r] == nil || an.Sim.Mean[r] == nil {
		return "", ""
	}
	return experimental.FormatFloat(*an.Sim.Mean[r]), experimental.FormatFloat(*an.Sim.Max[r])
}

// ExperimentalMatch returns the matched record of row r for target.
func (an Annotations) ExperimentalMatch(target string, r int) (experimental.Record, bool) {
	et, ok := an.Exp.Targets[target]
	if !ok || et.State != AnnotationDone {
		return nil, false
	}
	rec, ok := et.Rows[r]
	return rec, ok
}
