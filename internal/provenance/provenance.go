// Package provenance says which model made a cached artefact or a
// prediction: a Fingerprint per artefact family (model,
// SHA-256 of the weights, layer and reduction, precision policy, library and
// step-program versions), recorded beside the family's files by its first
// writer (RecordName) and checked by every later writer (Admit) and by the
// planner (ReadRecorded). The synthetic executor has its own fingerprint,
// which says synthetic (Synthetic).
package provenance

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"
)

// SyntheticVersion is the version of internal/embedding's synthetic
// embedder; bump it whenever its values change (SyntheticArtefact).
const SyntheticVersion = "1"

// SyntheticModel is the model name of every synthetic fingerprint.
const SyntheticModel = "synthetic"

// Fingerprint identifies what makes one artefact family's files (or, for a
// method's engine, its predictions). Two writers with equal fingerprints
// write interchangeable files. Zero fields are left out of the canonical
// form, so adding a field later does not change the ids already recorded.
type Fingerprint struct {
	// Synthetic marks kinflow's synthetic stand-in (no model at all).
	Synthetic bool `json:"synthetic,omitempty"`
	// Model names the model ("esm2_t33_650M_UR50D.pt", "ProtT5-XL", …).
	Model string `json:"model"`
	// Weights maps each weights file (its name relative to the configured
	// path, or its base name) to its SHA-256 in hex.
	Weights map[string]string `json:"weights,omitempty"`
	// Family is the artefact family (its folder under sequence_info/);
	// empty for a step's or an engine's fingerprint.
	Family string `json:"family,omitempty"`
	// Layer and Reduction are the family's layer ("26", "last") and how
	// residues are reduced ("mean", "weighted", "residues", …).
	Layer     string `json:"layer,omitempty"`
	Reduction string `json:"reduction,omitempty"`
	// Precision is the precision policy ("fp32", "fp16 on cuda", …).
	Precision string `json:"precision,omitempty"`
	// Libraries maps library names to versions (torch, fair-esm, …).
	Libraries map[string]string `json:"libraries,omitempty"`
	// Program names the step program or engine; ProgramVersion is its own
	// version (a step program's package version, a file's SHA-256, …).
	Program        string `json:"program,omitempty"`
	ProgramVersion string `json:"program_version,omitempty"`
	// Call is, for a method's engine, the SHA-256 of how kinflow calls the
	// program beyond its files: arguments, parameters, environment, row
	// keys and the declared output forms. Changing any of them changes the
	// numbers a program answers or how they are read, so it changes the id.
	Call string `json:"call,omitempty"`
}

// Canonical is the fingerprint's canonical JSON: compact, fields in
// declaration order, map keys sorted, no HTML escaping.
func (f Fingerprint) Canonical() []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(f) // a struct of strings and string maps always encodes
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// ID is the fingerprint's short stable id for display and comparison:
// "fp-" (or "synthetic-" for a synthetic one) and the first 16 hex digits
// of the SHA-256 of Canonical.
func (f Fingerprint) ID() string {
	if f.IsZero() {
		return ""
	}
	sum := sha256.Sum256(f.Canonical())
	p := "fp-"
	if f.Synthetic {
		p = "synthetic-"
	}
	return p + hex.EncodeToString(sum[:8])
}

// IsZero reports whether f says nothing (an unknown fingerprint).
func (f Fingerprint) IsZero() bool {
	return !f.Synthetic && f.Model == "" && len(f.Weights) == 0 && f.Program == ""
}

// Synthetic is the fingerprint of the synthetic executor for stepKey (the
// step's families get theirs through ForFamily).
func Synthetic(stepKey string) Fingerprint {
	return Fingerprint{Synthetic: true, Model: SyntheticModel, Program: "kinflow synthetic embedder " + stepKey, ProgramVersion: SyntheticVersion}
}

var layerRE = regexp.MustCompile(`_layer_([0-9]+|last)`)

// ForFamily is f narrowed to one artefact family: Family set, Layer and
// Reduction read from the family's name (`esm2_layer_26/mean_vecs` is layer
// 26, mean), Program's step key kept.
func (f Fingerprint) ForFamily(family string) Fingerprint {
	out := f
	out.Family = family
	if m := layerRE.FindStringSubmatch(family); m != nil {
		out.Layer = m[1]
	} else if strings.Contains(family, "_last") || strings.HasPrefix(family, "prot_t5_last") {
		out.Layer = "last"
	}
	base := family[strings.LastIndexByte(family, '/')+1:]
	switch {
	case strings.HasPrefix(base, "mean"):
		out.Reduction = "mean"
	case strings.HasPrefix(base, "weighted"):
		out.Reduction = "weighted"
	case strings.HasSuffix(family, "_mean"):
		out.Reduction = "mean"
	}
	return out
}

// Parse reads a fingerprint from a JSON value (a step server's ready line
// field, a `--fingerprint` answer); ok is false when v holds none.
func Parse(v any) (Fingerprint, bool) {
	if v == nil {
		return Fingerprint{}, false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return Fingerprint{}, false
	}
	var f Fingerprint
	if json.Unmarshal(b, &f) != nil || f.IsZero() {
		return Fingerprint{}, false
	}
	return f, true
}
