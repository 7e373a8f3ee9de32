package api

import (
	"encoding/json"

	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/wire"
)

// rangeNote is the column note of a range-class column.
const rangeNote = "A predicted range class (from low to high, in the unit shown), not a confidence interval or an error bound: " +
	"read it as a category, never as a number. Its midpoint is in the derived midpoint column; a measured value in the experimental column leaves it blank."

// rangeClassesOf describes target t's range classes under method d (false
// when d answers values for t).
func rangeClassesOf(d *methods.Descriptor, t methods.Target) (wire.RangeClasses, bool) {
	o := d.OutputOf(t)
	if !o.IsRange() {
		return wire.RangeClasses{}, false
	}
	mid, exp := methods.RangeColumns(t)
	return wire.RangeClasses{Target: string(t), Unit: o.Unit, Edges: o.Edges, Classes: o.Labels(),
		Midpoints: o.Midpoints(), MidpointColumn: mid, ExperimentalColumn: exp}, true
}

// rangeClasses is the JSON result's `rangeClasses`: each range column of
// job j's targets, by its column name; nil when the job has none.
func (s *Server) rangeClasses(j *store.Job) map[string]wire.RangeClasses {
	var out map[string]wire.RangeClasses
	for _, t := range j.Targets {
		d, ok := s.cat.Get(j.Methods[t])
		if !ok {
			continue
		}
		rc, ok := rangeClassesOf(d, methods.Target(t))
		if !ok {
			continue
		}
		if out == nil {
			out = map[string]wire.RangeClasses{}
		}
		out[d.OutputCols[methods.Target(t)]] = rc
	}
	return out
}

// rangeNotes adds the note of each range column to notes.
func rangeNotes(notes map[string]string, ranges map[string]wire.RangeClasses) map[string]string {
	if len(ranges) == 0 {
		return notes
	}
	if notes == nil {
		notes = map[string]string{}
	}
	for col := range ranges {
		notes[col] = rangeNote
	}
	return notes
}

// withKey adds `"key": v` as the last key of a JSON object body; the body
// unchanged when it is not an object or v does not encode.
func withKey(body []byte, key string, v any) []byte {
	if len(body) == 0 || body[len(body)-1] != '}' {
		return body
	}
	enc, err := json.Marshal(v)
	if err != nil {
		return body
	}
	k, _ := json.Marshal(key)
	out := append(body[:len(body)-1:len(body)-1], ',')
	out = append(out, k...)
	out = append(out, ':')
	out = append(out, enc...)
	return append(out, '}')
}
