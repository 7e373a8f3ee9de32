package input

import (
	"sort"

	"github.com/kinflow/kinflow/internal/methods"
)

// Target names, exact and case-sensitive (§1.7).
const (
	TargetKcat   = "kcat"
	TargetKm     = "Km"
	TargetKcatKm = "kcat/Km"
)

// CanonicalTargets is the fixed execution and reporting order of targets.
var CanonicalTargets = []string{TargetKcat, TargetKm, TargetKcatKm}

// Column names of the input schemas (§4.1), exact and case-sensitive.
const (
	ColProteinSequence = "Protein Sequence"
	ColSubstrate       = "Substrate"
	ColSubstrates      = "Substrates"
	ColProducts        = "Products"
)

// ServerLimit is the longest sequence any method is given (§4.3 SERVER_LIMIT);
// /validate/ reports it as "Server".
const ServerLimit = 10000

// MethodInfo is what input validation needs to know about one method of the
// catalogue (a projection of the §7.1 descriptor).
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
	// Generic is true for the generic subprocess engine (§4.7), whose row
	// validation differs from the dedicated engines' (§4.5).
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

// Catalogue is the method catalogue as input validation sees it. The API
// adapts internal/methods' registry to it (a thin wrapper), which keeps this
// package free of an import that the engines' own use of it would make
// circular.
type Catalogue interface {
	// Keys returns every method key in registry order.
	Keys() []string
	// Method returns the method with that exact key.
	Method(key string) (MethodInfo, bool)
}

// ValidKeys returns the keys of the methods supporting target, sorted, as
// the contract's error messages list them (§7.2 notes).
func ValidKeys(c Catalogue, target string) []string {
	var out []string
	for _, k := range c.Keys() {
		if m, ok := c.Method(k); ok && m.supports(target) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// StaticCatalogue is a Catalogue over a fixed list of methods, in the order
// given. Adapters over the real registry can build one at start-up.
type StaticCatalogue struct {
	list []MethodInfo
	byKy map[string]int
}

// NewStaticCatalogue returns a catalogue of methods in the given order.
func NewStaticCatalogue(methods []MethodInfo) *StaticCatalogue {
	c := &StaticCatalogue{list: append([]MethodInfo(nil), methods...), byKy: map[string]int{}}
	for i, m := range c.list {
		c.byKy[m.Key] = i
	}
	return c
}

// Keys implements Catalogue.
func (c *StaticCatalogue) Keys() []string {
	out := make([]string, len(c.list))
	for i, m := range c.list {
		out[i] = m.Key
	}
	return out
}

// Method implements Catalogue.
func (c *StaticCatalogue) Method(key string) (MethodInfo, bool) {
	i, ok := c.byKy[key]
	if !ok {
		return MethodInfo{}, false
	}
	return c.list[i], true
}

// FromMethods adapts the method catalogue of internal/methods.
func FromMethods(c *methods.Catalogue) Catalogue { return methodsCatalogue{c} }

type methodsCatalogue struct{ c *methods.Catalogue }

func (m methodsCatalogue) Keys() []string { return m.c.Keys() }

func (m methodsCatalogue) Method(key string) (MethodInfo, bool) {
	d, ok := m.c.Get(key)
	if !ok {
		return MethodInfo{}, false
	}
	return InfoOf(d), true
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
