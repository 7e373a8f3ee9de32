package input

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/kinflow/kinflow/internal/methods"
)

// Chemistry decides whether substrate and product texts are valid SMILES or
// InChI (§4.5 convert_to_mol) and converts them for the engines. The Go
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

// sentinel values that are never a molecule (§4.5; pandas' NaN shows as
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
// for the affected texts (and are logged).
func (c *Chemistry) ValidMany(ctx context.Context, texts []string) (map[string]bool, error) {
	verdict := make(map[string]bool, len(texts))
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
		return verdict, nil
	}
	info, err := c.rd.Probe(ctx)
	if err != nil {
		return verdict, c.fallback(ctx, err)
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
		return verdict, c.fallback(ctx, err)
	}
	for i, t := range ask {
		verdict[t] = res[i].OK
	}
	return verdict, nil
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

// robustCall runs op; when a chunk fails (helper crash or timeout) it is
// retried item by item, so one molecule that kills RDKit costs only its own
// verdict (invalid) rather than the whole batch.
func (c *Chemistry) robustCall(ctx context.Context, op string, items []string) ([]rdResult, error) {
	res, err := c.rd.call(ctx, op, items)
	if err == nil {
		return res, nil
	}
	if ctx.Err() != nil || errors.Is(err, ErrRDKitUnavailable) {
		return nil, err
	}
	c.log.Warn("rdkit batch failed; retrying item by item", "op", op, "items", len(items), "err", err)
	res = make([]rdResult, len(items))
	for i, t := range items {
		r, err := c.rd.call(ctx, op, []string{t})
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrRDKitUnavailable) {
				return nil, err
			}
			res[i] = rdResult{OK: false, Error: err.Error()}
			continue
		}
		res[i] = r[0]
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
