package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/wire"
)

// methodObject is one /methods/ entry, keys in the wire's fixed order.
type methodObject struct {
	ID               string   `json:"id"`
	DisplayName      string   `json:"displayName"`
	Authors          string   `json:"authors"`
	PublicationTitle string   `json:"publicationTitle"`
	CitationURL      string   `json:"citationUrl"`
	RepoURL          string   `json:"repoUrl"`
	MoreInfo         string   `json:"moreInfo"`
	Supports         []string `json:"supports"`
	InputFormat      string   `json:"inputFormat"`
	// AcceptedCSVTypes, AcceptedCSVTypesByTarget and InputBehaviorByTarget
	// say which substrate layouts the method takes and how a `Substrates`
	// list reaches it, per target (docs/api.md, "Substrate lists, candidate
	// sequences and per-target results").
	AcceptedCSVTypes         []string          `json:"acceptedCsvTypes"`
	AcceptedCSVTypesByTarget ordered[[]string] `json:"acceptedCsvTypesByTarget"`
	InputBehaviorByTarget    ordered[string]   `json:"inputBehaviorByTarget"`
	MaxSeqLen                *int              `json:"maxSeqLen"`
	RequiredColumns          []string          `json:"requiredColumns"`
	SubstrateFormat          string            `json:"substrateFormat"`
	// ModelVersion is kinflow's addition: the method's model_version,
	// bumped whenever a change would alter its predicted values.
	ModelVersion string `json:"modelVersion"`
	// Uncertainty is kinflow's addition: what the method says about the
	// uncertainty of each value, null for a method that gives none.
	Uncertainty *uncertaintyInfo `json:"uncertainty"`
	// RangeClasses is kinflow's addition: for a method that answers range
	// classes rather than values, each target's classes (texts, edges and
	// midpoints, in ascending order); null for a method that answers values.
	RangeClasses *ordered[wire.RangeClasses] `json:"rangeClasses"`
}

// uncertaintyInfo describes the uncertainty columns a method's results
// carry (after every other column: "Uncertainty <target> total (SD, log10)"
// and its parts).
type uncertaintyInfo struct {
	Measure string   `json:"measure"`
	Parts   []string `json:"parts"`
}

// methodUncertainty is the uncertaintyInfo of every method that gives one.
var methodUncertainty = uncertaintyInfo{
	Measure: "standard deviation of log10 of the value",
	Parts:   []string{"total", "aleatoric", "epistemic"},
}

type methodGroups struct {
	Kcat   []methodObject `json:"kcat"`
	Km     []methodObject `json:"Km"`
	KcatKm []methodObject `json:"kcat/Km"`
}

type methodsBody struct {
	Methods             methodGroups `json:"methods"`
	PredictionTypes     []string     `json:"predictionTypes"`
	LongSequenceOptions struct {
		Truncate string `json:"truncate"`
		Skip     string `json:"skip"`
	} `json:"longSequenceOptions"`
	Notes struct {
		Targets        string `json:"targets"`
		SubstrateLists string `json:"substrateLists"`
		Quota          string `json:"quota"`
		// PredictionUnits states this server's caps on prediction units per
		// row and per job, so that a client knows before it submits
		// (kinflow's addition).
		PredictionUnits string `json:"predictionUnits"`
	} `json:"notes"`
	// Synthetic is kinflow's addition: true when this server's prediction
	// engine is the synthetic one, whose numbers are stand-ins, not
	// predictions (the web page says so on its start page).
	Synthetic bool `json:"synthetic,omitempty"`
}

// ordered is a JSON object with keys in a fixed order (the catalogue's
// target order), which a Go map would not keep.
type ordered[V any] struct {
	keys []string
	vals []V
}

// MarshalJSON writes the entries in order.
func (o ordered[V]) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(o.vals[i])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

const (
	substrateFormatMulti  = "Semicolon-separated SMILES or InChI strings in the Substrates and Products columns (full reaction)."
	substrateFormatSingle = "One SMILES or InChI per row in the Substrate column; co-substrates may be joined with '.' in one cell."
)

func toMethodObject(d *methods.Descriptor) methodObject {
	o := methodObject{ID: d.Key, DisplayName: d.DisplayName, Authors: d.Authors, PublicationTitle: d.PublicationTitle,
		CitationURL: d.CitationURL, RepoURL: d.RepoURL, MoreInfo: d.MoreInfo, Supports: make([]string, 0, len(d.Supports)),
		InputFormat: d.InputFormat, RequiredColumns: d.RequiredColumns(), SubstrateFormat: substrateFormatSingle,
		ModelVersion: d.ModelVersion}
	union := map[string]bool{}
	for _, t := range d.Supports {
		o.Supports = append(o.Supports, string(t))
		types := d.AcceptedCSVTypes(t)
		o.AcceptedCSVTypesByTarget.keys = append(o.AcceptedCSVTypesByTarget.keys, string(t))
		o.AcceptedCSVTypesByTarget.vals = append(o.AcceptedCSVTypesByTarget.vals, types)
		o.InputBehaviorByTarget.keys = append(o.InputBehaviorByTarget.keys, string(t))
		o.InputBehaviorByTarget.vals = append(o.InputBehaviorByTarget.vals, d.InputBehavior(t))
		for _, ty := range types {
			union[ty] = true
		}
	}
	o.AcceptedCSVTypes = []string{}
	for _, ty := range []string{methods.CSVSingle, methods.CSVMulti, methods.CSVFullReaction} {
		if union[ty] {
			o.AcceptedCSVTypes = append(o.AcceptedCSVTypes, ty)
		}
	}
	if d.MaxSeqLen > 0 {
		n := d.MaxSeqLen
		o.MaxSeqLen = &n
	}
	if d.InputFormat == methods.InputMulti {
		o.SubstrateFormat = substrateFormatMulti
	}
	if d.Uncertainty {
		u := methodUncertainty
		o.Uncertainty = &u
	}
	for _, t := range d.Supports {
		if rc, ok := rangeClassesOf(d, t); ok {
			if o.RangeClasses == nil {
				o.RangeClasses = &ordered[wire.RangeClasses]{}
			}
			o.RangeClasses.keys = append(o.RangeClasses.keys, string(t))
			o.RangeClasses.vals = append(o.RangeClasses.vals, rc)
		}
	}
	return o
}

// buildMethodsBody renders /methods/ once: the catalogue never changes while
// the process runs.
func buildMethodsBody(cat *methods.Catalogue, caps input.UnitCaps) methodsBody {
	var b methodsBody
	group := func(t methods.Target) []methodObject {
		out := []methodObject{}
		for _, d := range cat.ForTarget(t) {
			out = append(out, toMethodObject(d))
		}
		return out
	}
	b.Methods = methodGroups{Kcat: group(methods.Kcat), Km: group(methods.Km), KcatKm: group(methods.KcatKm)}
	for _, t := range methods.Targets() {
		b.PredictionTypes = append(b.PredictionTypes, string(t))
	}
	b.LongSequenceOptions.Truncate = "Sequences longer than the selected methods' limit are shortened to their first and last halves and still predicted."
	b.LongSequenceOptions.Skip = "Rows whose sequence is longer than the selected methods' limit are left out of the prediction."
	b.Notes.Targets = "Choose what to predict with `targets` (a list of kcat, Km, kcat/Km) and `methods` (an object mapping each selected target to a method id listed here)."
	b.Notes.SubstrateLists = "A 'Substrates' cell may hold several SMILES or InChI separated by ';' (and 'Protein Sequence' several candidate sequences): each is predicted, kcat keeps the largest value, Km and kcat/Km are written as a JSON array in substrate order."
	b.Notes.Quota = "Each input reaction row counts once against your daily quota."
	b.Notes.PredictionUnits = fmt.Sprintf("Each substrate of a 'Substrates' list, each candidate sequence and each target is one prediction: this server makes at most %d per row and %d per job. A method whose program takes a row's whole list (inputBehaviorByTarget native_multi, native_full_reaction: method E's kcat, method D) reads every substrate, and for method D every product, for each candidate, so each of those counts as one prediction too. A submit over either limit is refused with a 400 naming the row; /validate/ reports the count (predictionUnits).", caps.PerRow, caps.PerJob)
	if caps.CellBytes > 0 {
		b.Notes.PredictionUnits += fmt.Sprintf(" A cell may hold at most %d bytes, and a row's Protein Sequence, Substrates and Products cells %d bytes together.", caps.CellBytes, caps.RowListBytes)
	}
	return b
}

// methodsList answers /methods/.
func (s *Server) methodsList(c *gin.Context) { c.JSON(http.StatusOK, s.methodsBody) }
