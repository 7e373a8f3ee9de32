package api

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kinflow/kinflow/internal/wire"

	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/result"
	"github.com/kinflow/kinflow/internal/store"
)

// SimilarityUnit is the unit of the similarity columns, stated wherever
// they are explained.
const SimilarityUnit = "% identity"

// similarityHead is the head of MEDIA/jobs/<id>/similarity.json (written by
// the TrainingSimilarity activity); the per-row values are not needed here.
type similarityHead struct {
	State   string `json:"state"`
	Message string `json:"message"`
	Method  string `json:"method"`
	Dataset string `json:"dataset"`
}

// similarityNote reads the job's similarity state; nil when the job has no
// similarity columns (not asked for, no kcat target) or before they are
// computed.
func (s *Server) similarityNote(j *store.Job) *wire.SimilarityNote {
	if !j.IncludeSimilarityColumns {
		return nil
	}
	h, ok := readSimilarityHead(filepath.Join(s.mediaRoot(), jobfiles.DirRel(j.ID), jobfiles.SimilarityFile))
	if !ok || h.Method == "" {
		return nil
	}
	n := &wire.SimilarityNote{State: h.State, Method: h.Method, Dataset: h.Dataset, Unit: SimilarityUnit,
		Columns: result.SimilarityColumns(h.Method)}
	switch h.State {
	case "done":
		n.Message = fmt.Sprintf("Similarity columns, in %s (0–100): the mean and the highest MMseqs2 identity of each row's sequence to the training data of method %s (dataset %s); 0 means no hit.",
			SimilarityUnit, h.Method, h.Dataset)
	case "not_configured":
		n.Message = fmt.Sprintf("Similarity columns (%s) are blank: %s", SimilarityUnit, h.Message)
	default:
		return nil
	}
	return n
}

// readSimilarityHead decodes the head keys of similarity.json and stops at
// the first per-row array: the file of a 10,000-row job is hundreds of
// kilobytes, and a status is polled every second.
func readSimilarityHead(path string) (similarityHead, bool) {
	var h similarityHead
	f, err := os.Open(path)
	if err != nil {
		return h, false
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return h, false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return h, false
		}
		var dst *string
		switch t {
		case "state":
			dst = &h.State
		case "message":
			dst = &h.Message
		case "method":
			dst = &h.Method
		case "dataset":
			dst = &h.Dataset
		default:
			// The per-row arrays follow the head (activities' field order);
			// nothing after them is needed.
			return h, true
		}
		if err := dec.Decode(dst); err != nil {
			return h, false
		}
	}
	return h, true
}

// columnNotes are the result's `columnNotes` (kinflow's addition to the
// JSON form): column name → one sentence, for the similarity columns.
func columnNotes(n *wire.SimilarityNote) map[string]string {
	if n == nil {
		return nil
	}
	out := map[string]string{}
	for _, c := range n.Columns {
		out[c] = n.Message
	}
	return out
}

// withColumnNotes adds `"columnNotes": {...}` as the last key of a JSON
// result object; nothing when there is no note.
func withColumnNotes(body []byte, notes map[string]string) []byte {
	if len(notes) == 0 {
		return body
	}
	return withKey(body, "columnNotes", notes)
}
