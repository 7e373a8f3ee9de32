package api

import (
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/provenance"
	"github.com/kinflow/kinflow/internal/store"
)

// jobProvenance is jobs/<id>/provenance.json as Finalize writes it
// (activities.JobProvenance): one entry per stage that reached its
// prediction, and a notice for unverified or synthetic artefacts.
type jobProvenance struct {
	Stages []provenance.Stage `json:"stages"`
	Notice string             `json:"notice,omitempty"`
}

// readProvenance reads a finished job's provenance; ok is false when there
// is none (an unfinished job, or one finished before provenance existed).
func (s *Server) readProvenance(j *store.Job) (jobProvenance, bool) {
	var p jobProvenance
	if j.Status != store.JobCompleted && j.Status != store.JobFailed {
		return p, false
	}
	b, err := os.ReadFile(filepath.Join(s.mediaRoot(), jobfiles.DirRel(j.ID), jobfiles.ProvenanceFile))
	if err != nil || json.Unmarshal(b, &p) != nil {
		return p, false
	}
	if p.Stages == nil {
		p.Stages = []provenance.Stage{}
	}
	return p, true
}

// withProvenance adds `"provenance": [...]` (and `"notice"` when set) as
// the last keys of a JSON result object.
func withProvenance(body []byte, p jobProvenance) []byte {
	if len(body) == 0 || body[len(body)-1] != '}' {
		return body
	}
	stages, err := json.Marshal(p.Stages)
	if err != nil {
		return body
	}
	out := append(body[:len(body)-1:len(body)-1], `,"provenance":`...)
	out = append(out, stages...)
	if p.Notice != "" {
		n, _ := json.Marshal(p.Notice)
		out = append(out, `,"notice":`...)
		out = append(out, n...)
	}
	return append(out, '}')
}
