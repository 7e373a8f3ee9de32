package input

import (
	"sort"

	"github.com/kinflow/kinflow/internal/methods"
)

// CanonicalTargets is the fixed execution and reporting order of targets
// (methods.Targets), as their wire spellings.
var CanonicalTargets = func() []string {
	ts := methods.Targets()
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = string(t)
	}
	return out
}()

// Column names of the input schemas, exact and case-sensitive.
const (
	ColProteinSequence = "Protein Sequence"
	ColSubstrate       = "Substrate"
	ColSubstrates      = "Substrates"
	ColProducts        = "Products"
)

// ServerLimit is the longest sequence any method is given (docs/input.md, "The rules in order");
// /validate/ reports it as "Server".
const ServerLimit = 10000

// MethodInfo is what input validation needs to know about one method of the
// catalogue (a projection of its methods.Descriptor).
type MethodInfo struct {
	// Key is the registry key, e.g. "A-H" (case-sensitive).
	Key string
	// Supports lists the targets the method predicts.
	Supports []string
	// MaxSeqLen is the longest sequence the method accepts; 0 means unlimited.
	MaxSeqLen int
	// RequiredColumns are `Protein Sequence` then the CSV columns the method
	// reads (col_to_kwarg keys).
	RequiredColumns []string
	// InputFormat is "single" (reads Substrate) or "multi" (Substrates +
	// Products).
	InputFormat string
	// Generic is true for the generic subprocess engine, whose row
	// validation differs from the dedicated engines' (docs/input.md, "The rules in order").
	Generic bool
}

func (m MethodInfo) supports(target string) bool {
	for _, s := range m.Supports {
		if s == target {
			return true
		}
	}
	return false
}

// methodInfo returns what input validation needs of the method with that
// exact key.
func methodInfo(cat *methods.Catalogue, key string) (MethodInfo, bool) {
	d, ok := cat.Get(key)
	if !ok {
		return MethodInfo{}, false
	}
	return InfoOf(d), true
}

// ValidKeys returns the keys of the methods supporting target, sorted, as
// the error messages list them.
func ValidKeys(c *methods.Catalogue, target string) []string {
	var out []string
	for _, k := range c.Keys() {
		if m, ok := methodInfo(c, k); ok && m.supports(target) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// InfoOf projects a descriptor onto what input validation uses.
func InfoOf(d *methods.Descriptor) MethodInfo {
	sup := make([]string, len(d.Supports))
	for i, t := range d.Supports {
		sup[i] = string(t)
	}
	return MethodInfo{
		Key:             d.Key,
		Supports:        sup,
		MaxSeqLen:       d.MaxSeqLen,
		RequiredColumns: d.RequiredColumns(),
		InputFormat:     d.InputFormat,
		Generic:         d.Engine == methods.EngineGeneric,
	}
}
