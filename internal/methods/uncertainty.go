package methods

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/kinflow/kinflow/internal/units"
)

// Forms of the numbers an UncertaintySource names.
const (
	// UncertaintySD is a standard deviation of log10 of the value
	// (CatPred's service: SD_total, SD_aleatoric, SD_epistemic).
	UncertaintySD = "sd"
	// UncertaintyVar is a variance of log10 of the value (CatPred's
	// predict.py: `<target>_mve_uncal_var`); kinflow serves its square
	// root.
	UncertaintyVar = "var"
)

// UncertaintySource names the per-row lists of a JSON output object that
// give each row's uncertainty, parallel to `predictions` (one entry per
// row, null for none). The numbers are of log10 of the value; a standard
// deviation of log10 does not change with the value's unit, so a program
// answering Km in M serves the same numbers in the mM column.
type UncertaintySource struct {
	// Total names the list of the total uncertainty; required.
	Total string `json:"total" yaml:"total"`
	// Aleatoric and Epistemic name the lists of its parts; optional.
	Aleatoric string `json:"aleatoric,omitempty" yaml:"aleatoric,omitempty"`
	Epistemic string `json:"epistemic,omitempty" yaml:"epistemic,omitempty"`
	// Form is sd (the default) or var.
	Form string `json:"form,omitempty" yaml:"form,omitempty"`
}

func (u *UncertaintySource) validate() error {
	if u.Total == "" {
		return errors.New("total names no output key")
	}
	switch u.Form {
	case "", UncertaintySD, UncertaintyVar:
	default:
		return fmt.Errorf("form %q (want sd or var)", u.Form)
	}
	return nil
}

// read reads the declared lists from the output object raw for n rows:
// nil when the output has no list under Total (the program gave none), an
// error when a named list has another length than n. A row whose total is
// not a finite, non-negative number has no uncertainty; a part that is not
// is left out.
func (u *UncertaintySource) read(raw []byte, n int, name string) ([]*units.Uncertainty, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		// A bare list of predictions carries no uncertainty.
		return nil, nil
	}
	list := func(key string) ([]json.RawMessage, error) {
		v, ok := obj[key]
		if key == "" || !ok || string(v) == "null" {
			return nil, nil
		}
		var l []json.RawMessage
		if err := json.Unmarshal(v, &l); err != nil || len(l) != n {
			return nil, &EngineError{Msg: fmt.Sprintf("%s produced an invalid %q list for %d input(s).", name, key, n), Err: err}
		}
		return l, nil
	}
	total, err := list(u.Total)
	if err != nil || total == nil {
		return nil, err
	}
	alea, err := list(u.Aleatoric)
	if err != nil {
		return nil, err
	}
	epi, err := list(u.Epistemic)
	if err != nil {
		return nil, err
	}
	out := make([]*units.Uncertainty, n)
	for i := range total {
		t := u.sd(total[i])
		if t == nil {
			continue
		}
		r := &units.Uncertainty{Total: *t}
		if alea != nil {
			r.Aleatoric = u.sd(alea[i])
		}
		if epi != nil {
			r.Epistemic = u.sd(epi[i])
		}
		out[i] = r
	}
	return out, nil
}

// sd is one entry as a standard deviation; nil when it is no finite,
// non-negative number.
func (u *UncertaintySource) sd(raw json.RawMessage) *float64 {
	var v *float64
	if err := json.Unmarshal(raw, &v); err != nil || !finiteSD(v) {
		return nil
	}
	if u.Form == UncertaintyVar {
		s := math.Sqrt(*v)
		return &s
	}
	return v
}
