package input

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/kinflow/kinflow/internal/methods"
)

// Chemistry decides whether substrate and product texts are valid SMILES or
// InChI (as the reference's convert_to_mol: SMILES first, then InChI) and
// converts them for the engines. The Go
// syntax checks always run; when an RDKit helper is given and can run, it
// then decides on what passed them (full parsing and sanitisation) and does
// the conversions. Without RDKit the Go checks alone decide and
// conversions return the text unchanged. Safe for concurrent use.
type Chemistry struct {
	rd  *RDKit
	log *slog.Logger
}

// NewChemistry returns a checker; rd may be nil (Go checks only).
func NewChemistry(rd *RDKit, log *slog.Logger) *Chemistry {
	if log == nil {
		log = slog.Default()
	}
	return &Chemistry{rd: rd, log: log}
}

// Checks says which chemistry checks are active.
type Checks struct {
	// GoSyntax is always true: the Go SMILES syntax and InChI shape checks.
	GoSyntax bool `json:"goSyntax"`
	// RDKit is true when the RDKit helper runs: SMILES are fully parsed and
	// sanitised (valences, aromaticity) and canonicalised.
	RDKit bool `json:"rdkit"`
	// RDKitVersion is the helper's RDKit version, when RDKit is true.
	RDKitVersion string `json:"rdkitVersion,omitempty"`
	// InChI is true when the helper can also parse InChI and write standard
	// InChI: with RDKit's own InChI support (not in Debian's build), or else
	// through Open Babel (Debian's python3-openbabel). Otherwise InChI gets
	// the Go shape check only.
	InChI bool `json:"inchi"`
	// InChIVia is "rdkit" or "openbabel" when InChI is true.
	InChIVia string `json:"inchiVia,omitempty"`
	// Reason says why RDKit is off, when it is.
	Reason string `json:"reason,omitempty"`
}

// Checks reports the active checks, starting the helper if needed.
func (c *Chemistry) Checks(ctx context.Context) Checks {
	ch := Checks{GoSyntax: true}
	if c.rd == nil {
		ch.Reason = "no RDKit helper configured"
		return ch
	}
	info, err := c.rd.Probe(ctx)
	if err != nil {
		ch.Reason = err.Error()
		return ch
	}
	ch.RDKit, ch.RDKitVersion, ch.InChI, ch.InChIVia = true, info.Version, info.InChI, info.InChIVia
	return ch
}

// sentinel values that are never a molecule (pandas' NaN shows as
// "NaN"/"nan" and Python's None as "None").
func isNullText(t string) bool {
	return t == "" || t == "None" || t == "NaN" || t == "nan"
}

// GoValid is the Go-only verdict on one text: not a null marker, and a
// well-formed InChI (when it starts with "InChI=") or SMILES.
func GoValid(text string) bool {
	t := strings.TrimSpace(text)
	if isNullText(t) {
		return false
	}
	if strings.HasPrefix(t, "InChI=") {
		return CheckInChI(t) == nil
	}
	return CheckSMILES(t) == nil
}

// ValidMany returns the verdict for every distinct text of texts. An error
// is returned only when ctx ends; RDKit failures fall back to the Go verdict
// for the affected texts (and are logged). A text RDKit could not check in
// time is false here; ValidManyDetail tells it apart.
func (c *Chemistry) ValidMany(ctx context.Context, texts []string) (map[string]bool, error) {
	v, _, err := c.ValidManyDetail(ctx, texts)
	return v, err
}

// ValidManyDetail is ValidMany that also returns the texts that passed the
// Go checks but that RDKit could not check within the molecule time bound
// (their verdict is false: nothing unchecked goes to an engine, but it is
// not "invalid" either).
func (c *Chemistry) ValidManyDetail(ctx context.Context, texts []string) (verdict, unchecked map[string]bool, err error) {
	verdict = make(map[string]bool, len(texts))
	var ask []string
	for _, t := range texts {
		if _, done := verdict[t]; done {
			continue
		}
		ok := GoValid(t)
		verdict[t] = ok
		if ok {
			ask = append(ask, t)
		}
	}
	if c.rd == nil || len(ask) == 0 {
		return verdict, nil, nil
	}
	info, err := c.rd.Probe(ctx)
	if err != nil {
		return verdict, nil, c.fallback(ctx, err)
	}
	if !info.InChI { // neither RDKit nor Open Babel reads InChI: the shape check stands
		kept := ask[:0]
		for _, t := range ask {
			if !strings.HasPrefix(strings.TrimSpace(t), "InChI=") {
				kept = append(kept, t)
			}
		}
		ask = kept
	}
	res, err := c.robustCall(ctx, "check", ask)
	if err != nil {
		return verdict, nil, c.fallback(ctx, err)
	}
	for i, t := range ask {
		verdict[t] = res[i].OK
		if res[i].TimedOut {
			if unchecked == nil {
				unchecked = map[string]bool{}
			}
			unchecked[t] = true
		}
	}
	return verdict, unchecked, nil
}

// Valid is ValidMany for one text.
func (c *Chemistry) Valid(ctx context.Context, text string) (bool, error) {
	v, err := c.ValidMany(ctx, []string{text})
	return v[text], err
}

// fallback logs an RDKit failure and returns nil (the Go verdicts stand),
// unless ctx ended.
func (c *Chemistry) fallback(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !errors.Is(err, ErrRDKitUnavailable) {
		c.log.Warn("rdkit check failed; using the Go checks", "err", err)
	}
	return nil
}

// robustCall runs op over items with every molecule time-bounded. Short
// texts go in chunks; a chunk that fails (helper crash or timeout) is
// retried item by item, so one molecule that kills RDKit costs only its own
// verdict. Long texts (soloLen), where the slow molecules are, go alone. A
// molecule that runs into its bound is remembered and answered TimedOut at
// once next time; after maxTimeoutsPerCall of them the call's remaining
// long texts are answered TimedOut untried, which bounds how long one call
// can hold a helper.
func (c *Chemistry) robustCall(ctx context.Context, op string, items []string) ([]rdResult, error) {
	res := make([]rdResult, len(items))
	var short, long []int
	for i, t := range items {
		if len(t) < soloLen {
			if a, ok := c.rd.answers.Get(answerKey(op, t)); ok {
				res[i] = a
				continue
			}
		}
		switch {
		case c.rd.timedOut.Contains(answerKey(op, t)):
			res[i] = rdResult{TimedOut: true}
		case len(t) >= soloLen:
			long = append(long, i)
		default:
			short = append(short, i)
		}
	}
	timeouts := 0
	one := func(i int) error {
		if timeouts >= maxTimeoutsPerCall {
			res[i] = rdResult{TimedOut: true}
			return nil
		}
		r, err := c.rd.request(ctx, op, []string{items[i]})
		switch {
		case err == nil:
			res[i] = r[0]
			if len(items[i]) < soloLen {
				c.rd.answers.Add(answerKey(op, items[i]), r[0])
			}
		case ctx.Err() != nil || errors.Is(err, ErrRDKitUnavailable):
			return err
		case errors.Is(err, errMoleculeTimeout):
			timeouts++
			c.rd.timedOut.Add(answerKey(op, items[i]), struct{}{})
			res[i] = rdResult{TimedOut: true, Error: err.Error()}
		default:
			res[i] = rdResult{OK: false, Error: err.Error()}
		}
		return nil
	}
	for start := 0; start < len(short); start += rdkitChunk {
		idx := short[start:min(start+rdkitChunk, len(short))]
		batch := make([]string, len(idx))
		for k, i := range idx {
			batch[k] = items[i]
		}
		r, err := c.rd.request(ctx, op, batch)
		if err == nil {
			for k, i := range idx {
				res[i] = r[k]
				// The helper's own answer, short text: kept.
				c.rd.answers.Add(answerKey(op, batch[k]), r[k])
			}
			continue
		}
		if ctx.Err() != nil || errors.Is(err, ErrRDKitUnavailable) {
			return nil, err
		}
		c.log.Warn("rdkit batch failed; retrying item by item", "op", op, "items", len(idx), "err", err)
		for _, i := range idx {
			if err := one(i); err != nil {
				return nil, err
			}
		}
	}
	for _, i := range long {
		if err := one(i); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// Convert returns each text in the given form. A text RDKit cannot convert,
// or any text when RDKit (or InChI support, RDKit's or Open Babel's, for
// methods.FormInChI and InChI input) is unavailable, is returned trimmed but
// otherwise unchanged; the second result says whether the helper did the
// conversion.
func (c *Chemistry) Convert(ctx context.Context, form methods.SubstrateForm, texts []string) ([]string, bool, error) {
	out := make([]string, len(texts))
	for i, t := range texts {
		out[i] = strings.TrimSpace(t)
	}
	if c.rd == nil || len(texts) == 0 {
		return out, false, nil
	}
	info, err := c.rd.Probe(ctx)
	if err != nil || (form == methods.FormInChI && !info.InChI) {
		return out, false, c.fallbackIf(ctx, err)
	}
	res, err := c.robustCall(ctx, string(form), out)
	if err != nil {
		return out, false, c.fallbackIf(ctx, err)
	}
	for i, r := range res {
		if r.OK && r.Value != nil {
			out[i] = *r.Value
		}
	}
	return out, true, nil
}

func (c *Chemistry) fallbackIf(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	return c.fallback(ctx, err)
}
