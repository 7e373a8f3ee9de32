package input

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/kinflow/kinflow/internal/fairness"
	"github.com/kinflow/kinflow/internal/methods"
)

// Long-sequence modes of handleLongSequences (docs/input.md, "The rules in order").
const (
	LongTruncate = "truncate"
	LongSkip     = "skip"
)

// Option field names on the wire, and the legacy ones that are mapped onto
// targets and methods.
const (
	FieldTargets                  = "targets"
	FieldMethods                  = "methods"
	FieldHandleLongSequences      = "handleLongSequences"
	FieldUseExperimental          = "useExperimental"
	FieldIncludeSimilarityColumns = "includeSimilarityColumns"
	FieldCanonicalizeSubstrates   = "canonicalizeSubstrates"
	FieldDisableGPUPrecompute     = "disableGpuPrecompute"
	FieldUsePredictionCache       = "usePredictionCache"
	FieldRunSimilarity            = "runSimilarity"
	FieldPredictionType           = "predictionType"
	FieldKcatMethod               = "kcatMethod"
	FieldKmMethod                 = "kmMethod"
	// FieldPriority (kinflow's option) asks for the job to be bulk.
	FieldPriority = "priority"
)

// optionFields are the fields RawOptions keeps.
var optionFields = []string{FieldTargets, FieldMethods, FieldHandleLongSequences, FieldUseExperimental,
	FieldIncludeSimilarityColumns, FieldCanonicalizeSubstrates, FieldDisableGPUPrecompute, FieldUsePredictionCache,
	FieldPredictionType, FieldKcatMethod, FieldKmMethod, FieldPriority}

// Options are a submit request's options after the submit checks 1–7
// (docs/input.md, "The rules in order").
type Options struct {
	// Targets are the selected targets, de-duplicated, in canonical order.
	Targets []string
	// Methods is every entry of `methods` (including entries for targets
	// that were not selected, which are stored on the job but not
	// validated). Non-string values are kept as their JSON text.
	Methods map[string]string
	// HandleLongSequences is LongTruncate or LongSkip.
	HandleLongSequences      string
	UseExperimental          bool
	IncludeSimilarityColumns bool
	CanonicalizeSubstrates   bool
	DisableGPUPrecompute     bool
	// UsePredictionCache (kinflow's option, default true) serves units
	// predicted before from the prediction cache; false predicts every
	// unit afresh (and still stores what it computed).
	UsePredictionCache bool
	// Priority is the requested class (fairness.RequestAuto or
	// fairness.RequestBulk); the job's size may still make it bulk.
	Priority string
}

// MethodFor returns the method key selected for target.
func (o Options) MethodFor(target string) string { return o.Methods[target] }

// RawOptions are a submit request's option fields as received, decoded into
// JSON values (string, bool, json.Number, []any, map[string]any, nil), with
// presence kept: a field that is absent differs from one that is null or "".
type RawOptions struct {
	fields map[string]any
}

// Chosen reports whether the request names targets (or the legacy
// predictionType): /validate/ then reports only the chosen methods.
func (r RawOptions) Chosen() bool {
	t, ok := r.get(FieldTargets)
	if !isEmptyTargets(t, ok) {
		return true
	}
	pt, ok := r.get(FieldPredictionType)
	return ok && pt != nil && pt != ""
}

func (r RawOptions) get(name string) (any, bool) {
	v, ok := r.fields[name]
	return v, ok
}

// OptionsFromForm reads the option fields of a multipart (or urlencoded)
// submit form. When a field repeats, the last value wins. `targets` and
// `methods` are JSON-encoded, with any spacing; a value that is not JSON is
// a 400 with a message naming the field. An empty `targets` or `methods`
// counts as `[]` / `{}`.
func OptionsFromForm(values map[string][]string) (RawOptions, error) {
	r := RawOptions{fields: map[string]any{}}
	for _, name := range optionFields {
		vs, ok := values[name]
		if !ok || len(vs) == 0 {
			continue
		}
		s := vs[len(vs)-1]
		switch name {
		case FieldTargets, FieldMethods:
			if strings.TrimSpace(s) == "" {
				if name == FieldTargets {
					r.fields[name] = []any{}
				} else {
					r.fields[name] = map[string]any{}
				}
				continue
			}
			v, err := decodeJSONValue([]byte(s))
			if err != nil {
				if name == FieldTargets {
					return RawOptions{}, &Error{Kind: KindInvalid, Err: err,
						Msg: `Invalid 'targets' field: it must be a JSON array such as ["kcat", "Km"].`}
				}
				return RawOptions{}, &Error{Kind: KindInvalid, Err: err,
					Msg: `Invalid 'methods' field: it must be a JSON object such as {"kcat": "D"}.`}
			}
			r.fields[name] = v
		default:
			r.fields[name] = s
		}
	}
	return r, nil
}

// OptionsFromJSON reads the option fields of a JSON submit body (the Fields
// of a JSONBody).
func OptionsFromJSON(fields map[string]json.RawMessage) (RawOptions, error) {
	r := RawOptions{fields: map[string]any{}}
	for _, name := range optionFields {
		raw, ok := fields[name]
		if !ok {
			continue
		}
		v, err := decodeJSONValue(raw)
		if err != nil {
			return RawOptions{}, errBadJSON(err)
		}
		r.fields[name] = v
	}
	return r, nil
}

func decodeJSONValue(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

// CoerceBool is the boolean rule for option fields (docs/input.md, "The rules in order"):
// nil → def; a bool is itself; a string is true iff, trimmed and
// lower-cased, it is 1, true, yes or on (so "" is false, not the default),
// after first decoding a string that is itself a JSON string literal such as
// `"True"` (kinflow's addition); a number is true when non-zero
// (json.Number, float64, int); any other type → def.
func CoerceBool(v any, def bool) bool {
	switch x := v.(type) {
	case nil:
		return def
	case bool:
		return x
	case string:
		s := strings.TrimSpace(x)
		if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
			var inner string
			if err := json.Unmarshal([]byte(s), &inner); err == nil {
				s = strings.TrimSpace(inner)
			}
		}
		switch strings.ToLower(s) {
		case "1", "true", "yes", "on":
			return true
		}
		return false
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return def
		}
		return f != 0
	case float64:
		return x != 0
	case int:
		return x != 0
	default:
		return def
	}
}

// RunSimilarityForm is /validate/'s multipart rule: true only when the
// field, lower-cased, is exactly "true" ("1" and "yes" are false).
func RunSimilarityForm(values map[string][]string) bool {
	vs := values[FieldRunSimilarity]
	if len(vs) == 0 {
		return false
	}
	return strings.ToLower(vs[len(vs)-1]) == "true"
}

// RunSimilarityJSON is /validate/'s JSON rule: Python truthiness of the raw
// value, so the string "false" is true, as in the reference.
func RunSimilarityJSON(fields map[string]json.RawMessage) bool {
	raw, ok := fields[FieldRunSimilarity]
	if !ok {
		return false
	}
	v, err := decodeJSONValue(raw)
	if err != nil {
		return false
	}
	return truthy(v)
}

func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		return err != nil || f != 0
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

// jsonText renders a decoded JSON value for a message or for storage.
func jsonText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func isEmptyTargets(v any, present bool) bool {
	if !present || v == nil {
		return true
	}
	switch x := v.(type) {
	case []any:
		return len(x) == 0
	case string:
		return x == ""
	}
	return false
}

// applyLegacy maps predictionType/kcatMethod/kmMethod onto targets/methods
// when targets is absent or empty and predictionType is present
// (kinflow's addition; the reference ignores them). Entries already in
// `methods` are kept.
func applyLegacy(r RawOptions) (targets any, meths any, tPresent, mPresent bool) {
	targets, tPresent = r.get(FieldTargets)
	meths, mPresent = r.get(FieldMethods)
	pt, ok := r.get(FieldPredictionType)
	if !ok || pt == nil || !isEmptyTargets(targets, tPresent) {
		return
	}
	var legacy []string
	switch pt {
	case "kcat":
		legacy = []string{string(methods.Kcat)}
	case "Km":
		legacy = []string{string(methods.Km)}
	case "both":
		legacy = []string{string(methods.Kcat), string(methods.Km)}
	default:
		return
	}
	m, isObj := meths.(map[string]any)
	if !mPresent || meths == nil {
		m, isObj = map[string]any{}, true
	}
	if isObj {
		m = cloneMap(m)
		for _, t := range legacy {
			field := FieldKcatMethod
			if t == string(methods.Km) {
				field = FieldKmMethod
			}
			if v, ok := r.get(field); ok {
				if _, set := m[t]; !set {
					m[t] = v
				}
			}
		}
		meths, mPresent = m, true
	}
	ts := make([]any, len(legacy))
	for i, t := range legacy {
		ts[i] = t
	}
	return ts, meths, true, mPresent
}

func cloneMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// ValidateOptions runs steps 1–7 of the submit pipeline (docs/input.md, "The rules in order") in order; the
// first failure wins. Errors are *Error (400).
func ValidateOptions(cat *methods.Catalogue, r RawOptions) (Options, error) {
	targetsV, methodsV, _, mPresent := applyLegacy(r)
	allowed := strings.Join(CanonicalTargets, ", ")

	// 1. targets is a non-empty list.
	list, ok := targetsV.([]any)
	if !ok || len(list) == 0 {
		msg := "Invalid targets: provide a non-empty list of targets drawn from " + allowed + "."
		if pt, ok := r.get(FieldPredictionType); ok && pt != nil {
			msg += " (predictionType must be kcat, Km or both.)"
		}
		return Options{}, invalidf("%s", msg)
	}
	// 2. methods is an object (absent → {}).
	methodsObj, ok := methodsV.(map[string]any)
	if !mPresent || methodsV == nil {
		methodsObj, ok = map[string]any{}, true
	}
	if !ok {
		return Options{}, invalidf(`Invalid methods payload: expected an object mapping each target to a method key, e.g. {"kcat": "D"}.`)
	}
	// 3. every target is known (case-sensitive).
	var bad []string
	selected := map[string]bool{}
	for _, t := range list {
		s, isStr := t.(string)
		if !isStr || !slices.Contains(CanonicalTargets, s) {
			if txt := jsonText(t); !slices.Contains(bad, txt) {
				bad = append(bad, txt)
			}
			continue
		}
		selected[s] = true
	}
	if len(bad) > 0 {
		return Options{}, invalidf("Invalid targets: %s. Allowed targets: %s.", strings.Join(bad, ", "), allowed)
	}
	// 4. every key of methods is a target.
	bad = bad[:0]
	for _, k := range slices.Sorted(maps.Keys(methodsObj)) {
		if !slices.Contains(CanonicalTargets, k) {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		return Options{}, invalidf("Invalid methods keys: %s. Allowed keys: %s.", strings.Join(bad, ", "), allowed)
	}
	opts := Options{Methods: map[string]string{}}
	for k, v := range methodsObj {
		opts.Methods[k] = jsonText(v)
	}
	// 5–6. each selected target, in canonical order, has a valid method.
	for _, t := range CanonicalTargets {
		if !selected[t] {
			continue
		}
		opts.Targets = append(opts.Targets, t)
		key, isStr := methodsObj[t].(string)
		if !isStr || strings.TrimSpace(key) == "" {
			return Options{}, invalidf("Missing method selection for target '%s'.", t)
		}
		m, ok := methodInfo(cat, key)
		if !ok || !m.supports(t) {
			return Options{}, invalidf("Invalid method '%s' for target '%s'. Valid methods: %s.",
				key, t, strings.Join(ValidKeys(cat, t), ", "))
		}
	}
	// 7. handleLongSequences: absent → truncate; anything else must be exact.
	opts.HandleLongSequences = LongTruncate
	if v, ok := r.get(FieldHandleLongSequences); ok {
		s, isStr := v.(string)
		if !isStr || (s != LongTruncate && s != LongSkip) {
			return Options{}, invalidf("Invalid handleLongSeq value '%s': it must be 'truncate' or 'skip'.", jsonText(v))
		}
		opts.HandleLongSequences = s
	}
	opts.UseExperimental = r.bool(FieldUseExperimental, false)
	opts.IncludeSimilarityColumns = r.bool(FieldIncludeSimilarityColumns, true)
	opts.CanonicalizeSubstrates = r.bool(FieldCanonicalizeSubstrates, true)
	opts.DisableGPUPrecompute = r.bool(FieldDisableGPUPrecompute, false)
	opts.UsePredictionCache = r.bool(FieldUsePredictionCache, true)
	// 8. priority (kinflow's): absent, null, "" or "auto", or "bulk".
	opts.Priority = fairness.RequestAuto
	if v, ok := r.get(FieldPriority); ok && v != nil {
		s, isStr := v.(string)
		p, err := fairness.ParseRequest(s)
		if !isStr || err != nil {
			return Options{}, invalidf("Invalid priority '%s': it must be 'auto' (the job's size decides) or 'bulk' (served after other work).", jsonText(v))
		}
		opts.Priority = p
	}
	return opts, nil
}

func (r RawOptions) bool(name string, def bool) bool {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	return CoerceBool(v, def)
}
