package methods

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/units"
)

// Output columns of the dedicated engines (README.md, "Adding a method").
const (
	colPredictedValue = "Predicted Value"
	colMethodDKcat    = "kcat [s^(-1)]"
	colMethodAPred    = "y_pred"
)

// engineRun is one run of a method's command: its files and what the
// command line needs from them.
type engineRun struct {
	contract FileContract
	in, out  string
	// vars are the contract's own placeholders ({task}, {model_config}).
	vars map[string]string
	// keys are the (sequence, substrate) pairs of the rows, in order, for
	// method A's matching of output rows.
	keys [][2]string
	// notes go to the stage's engine log before the command runs.
	notes []string
	// unc is where the JSON output gives uncertainties (nil: kinflow's
	// `uncertainties`).
	unc *UncertaintySource
	// sent, when not nil, are the rows the input file holds, in order
	// (the contract left the others out); skipped gives each left-out
	// row's reason.
	sent    []int
	skipped map[int]string
}

// writeEngineInput writes the input file of d's file contract for the
// rows of req into req.Dir (README.md, "Adding a method"), converting substrates as
// canonicalizeSubstrates asks for the dedicated contracts (docs/input.md,
// "The rules in order").
func writeEngineInput(ctx context.Context, d *Descriptor, req CommandRequest) (*engineRun, error) {
	jobID, dir := req.JobID, req.Dir
	run := &engineRun{contract: d.FileContract.OrJSON(), vars: map[string]string{}, unc: d.UncertaintyFrom}
	fail := func(err error) (*engineRun, error) {
		return nil, &EngineError{Msg: d.DisplayName + " could not write its input file", Err: err}
	}
	if run.contract == ContractJSON {
		safeKey := unsafeFileChars.ReplaceAllString(d.Key, "_")
		run.in = filepath.Join(dir, fmt.Sprintf("%s_input_%s.json", safeKey, jobID))
		run.out = filepath.Join(dir, fmt.Sprintf("%s_output_%s.json", safeKey, jobID))
		in := EngineInput{Method: d.Key, Target: req.Target, PublicID: jobID, Params: map[string]any{"canonicalize_substrates": req.Canonicalize}}
		for k, v := range d.TargetKwargs[Target(req.Target)] {
			in.Params[k] = v
		}
		for k, v := range d.Params[Target(req.Target)] {
			in.Params[k] = v
		}
		for _, r := range req.Rows {
			row := map[string]string{"sequence": r.Seq}
			for k, v := range r.Kwargs {
				row[k] = v
			}
			if d.RowSeqID && r.SeqID != "" {
				row["seq_id"] = r.SeqID
			}
			in.Rows = append(in.Rows, row)
		}
		if err := fsutil.WriteJSONAtomic(run.in, in); err != nil {
			return fail(err)
		}
		return run, nil
	}

	ext := "csv"
	if run.contract == ContractSubstrateTSV {
		ext = "tsv"
	}
	run.in = filepath.Join(dir, fmt.Sprintf("input_%s.%s", jobID, ext))
	run.out = filepath.Join(dir, fmt.Sprintf("output_%s.%s", jobID, ext))
	kwarg := func(n int) string {
		if n < len(d.ColToKwarg) {
			return d.ColToKwarg[n].Kwarg
		}
		return ""
	}
	rows := req.Rows
	seqs := make([]string, len(rows))
	for k, r := range rows {
		seqs[k] = r.Seq
	}
	var buf bytes.Buffer
	switch run.contract {
	case ContractSubstrateCSV, ContractMethodA, ContractSubstrateTSV:
		form := FormSMILES
		if req.Canonicalize {
			form = FormCanonicalSMILES
		}
		subs := make([]string, len(rows))
		for k, r := range rows {
			subs[k] = r.Kwargs[kwarg(0)]
		}
		conv, byRDKit, err := req.Chem.Convert(ctx, form, subs)
		if err != nil {
			return nil, err
		}
		if !byRDKit && len(subs) > 0 && req.Unconverted != nil {
			req.Unconverted()
		}
		run.notes = append(run.notes, conversionNote(string(form), byRDKit))
		if run.contract == ContractSubstrateTSV {
			run.tsvInput(&buf, conv, seqs)
			break
		}
		if run.contract == ContractSubstrateCSV {
			w := csv.NewWriter(&buf)
			_ = w.Write([]string{"Substrate SMILES", ProteinSequenceColumn})
			for k := range rows {
				_ = w.Write([]string{conv[k], seqs[k]})
			}
			w.Flush()
			break
		}
		// Method A's "CSV" is a JSON list, as its program expects.
		type row struct {
			SMILES   string `json:"smiles"`
			Sequence string `json:"sequence"`
			SeqAlias string `json:"Sequence"`
		}
		list := make([]row, len(rows))
		run.keys = make([][2]string, len(rows))
		for k := range rows {
			list[k] = row{SMILES: conv[k], Sequence: seqs[k], SeqAlias: seqs[k]}
			run.keys[k] = [2]string{seqs[k], conv[k]}
		}
		if err := json.NewEncoder(&buf).Encode(list); err != nil {
			return fail(err)
		}
		kw := d.TargetKwargs[Target(req.Target)]
		run.vars["task"] = methodATask(req.Target)
		if v := kw["model_config"]; v != "" {
			run.vars["model_config"] = v
		} else if v := kw["model_variant"]; v != "" {
			run.vars["model_config"] = "A-" + v
		} else {
			run.vars["model_config"] = d.Key
		}
	case ContractReactionCSV:
		subs, err := reactionCells(ctx, req, kwarg(0), &run.notes)
		if err != nil {
			return nil, err
		}
		prods, err := reactionCells(ctx, req, kwarg(1), nil)
		if err != nil {
			return nil, err
		}
		w := csv.NewWriter(&buf)
		_ = w.Write([]string{"Substrates", "Products", ProteinSequenceColumn})
		for k := range rows {
			_ = w.Write([]string{subs[k], prods[k], seqs[k]})
		}
		w.Flush()
	default:
		return nil, &EngineError{Msg: fmt.Sprintf("%s: unknown file contract %q", d.DisplayName, run.contract)}
	}
	if err := fsutil.WriteFileAtomic(run.in, buf.Bytes(), 0o644); err != nil {
		return fail(err)
	}
	return run, nil
}

// Reasons of the rows the substrate_tsv contract does not send: its
// program knows only the twenty standard amino acids and one molecule.
const (
	ReasonTSVSequence  = "Invalid protein sequence (unsupported amino acid characters)"
	ReasonTSVFragments = "Substrate contains multiple disconnected fragments and cannot be processed"
)

// tsvInput writes the substrate_tsv input of the rows (substrates conv,
// sequences seqs) that its program can read, and records the others.
func (run *engineRun) tsvInput(buf *bytes.Buffer, conv, seqs []string) {
	run.sent, run.skipped = []int{}, map[int]string{}
	buf.WriteString("Substrate Name\tSubstrate SMILES\tProtein Sequence\n")
	for k := range seqs {
		switch {
		case strings.Trim(seqs[k], "ACDEFGHIKLMNPQRSTVWY") != "" || seqs[k] == "":
			run.skipped[k] = ReasonTSVSequence
		case !strings.HasPrefix(conv[k], "InChI=") && strings.Contains(conv[k], "."):
			run.skipped[k] = ReasonTSVFragments
		case strings.ContainsAny(conv[k], "\t\r\n"):
			// A tab or line break would shift the program's columns.
			run.skipped[k] = "Invalid substrate (not a valid SMILES or InChI)"
		default:
			run.sent = append(run.sent, k)
			fmt.Fprintf(buf, "noname\t%s\t%s\n", conv[k], seqs[k])
		}
	}
}

// spread places the values of the rows sent (in order) at their rows, of
// n, and gives each row left out its reason.
func (run *engineRun) spread(vals []*float64, reasons map[int]string, n int) ([]*float64, map[int]string) {
	if run.sent == nil {
		return vals, reasons
	}
	out := make([]*float64, n)
	rs := map[int]string{}
	for j, k := range run.sent {
		if j < len(vals) {
			out[k] = vals[j]
		}
		if r, ok := reasons[j]; ok {
			rs[k] = r
		}
	}
	for k, r := range run.skipped {
		rs[k] = r
	}
	return out, rs
}

// readTSVColumn reads the substrate_tsv output: a header line, then one
// line per row sent whose fourth tab-separated field is the value (a
// missing or unreadable field is no value).
func readTSVColumn(path string, n int, name string) ([]*float64, error) {
	bad := func(msg string, err error) ([]*float64, error) {
		return nil, &EngineError{Msg: name + " " + msg, Err: err}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return bad("output file could not be read.", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\r\n"), "\n")
	if len(lines) == 0 || strings.TrimSpace(lines[0]) == "" {
		return bad("output file could not be read.", fmt.Errorf("no header line"))
	}
	var vals []*float64
	for _, l := range lines[1:] {
		parts := strings.Split(strings.TrimRight(l, "\r"), "\t")
		if len(parts) < 4 {
			vals = append(vals, nil)
			continue
		}
		vals = append(vals, parseCell(parts[3]))
	}
	if len(vals) != n {
		return bad(fmt.Sprintf("produced %d prediction(s) for %d input(s).", len(vals), n), nil)
	}
	return vals, nil
}

// methodATask is method A's --task value for a target.
func methodATask(target string) string {
	if target == string(Km) {
		return "KM"
	}
	return target
}

// reactionCells returns method D's cells of one column: the `;` tokens of
// each row, converted to standard InChI when canonicalize is set, re-joined
// with `;`.
func reactionCells(ctx context.Context, req CommandRequest, kwarg string, notes *[]string) ([]string, error) {
	tokens := make([][]string, len(req.Rows))
	var flat []string
	for k, r := range req.Rows {
		for _, t := range strings.Split(r.Kwargs[kwarg], ";") {
			if t = strings.TrimSpace(t); t != "" {
				tokens[k] = append(tokens[k], t)
				flat = append(flat, t)
			}
		}
	}
	if req.Canonicalize {
		conv, byRDKit, err := req.Chem.Convert(ctx, FormInChI, flat)
		if err != nil {
			return nil, err
		}
		if !byRDKit && len(flat) > 0 && req.Unconverted != nil {
			req.Unconverted()
		}
		if notes != nil {
			*notes = append(*notes, conversionNote(string(FormInChI), byRDKit))
		}
		n := 0
		for k := range tokens {
			for j := range tokens[k] {
				tokens[k][j] = conv[n]
				n++
			}
		}
	}
	out := make([]string, len(req.Rows))
	for k := range tokens {
		out[k] = strings.Join(tokens[k], ";")
	}
	return out, nil
}

// conversionNote says in the engine log how substrates were handed over.
func conversionNote(form string, converted bool) string {
	if converted {
		return "substrates converted to the " + form + " form by the chemistry helper (RDKit; InChI through Open Babel when RDKit lacks it)"
	}
	return "substrates passed as given: the chemistry helper could not convert them to the " + form + " form here"
}

// readEngineResult reads the output of run's contract for n valid rows.
func readEngineResult(run *engineRun, n int, name string) ([]*float64, map[int]string, []*units.Uncertainty, error) {
	switch run.contract {
	case ContractJSON:
		return readEngineOutput(run.out, n, name, run.unc)
	case ContractSubstrateCSV:
		vals, err := readOutputColumn(run.out, colPredictedValue, n, nil, name)
		return vals, nil, nil, err
	case ContractReactionCSV:
		vals, err := readOutputColumn(run.out, colMethodDKcat, n, nil, name)
		return vals, nil, nil, err
	case ContractMethodA:
		vals, err := readOutputColumn(run.out, colMethodAPred, n, run.keys, name)
		return vals, nil, nil, err
	case ContractSubstrateTSV:
		vals, err := readTSVColumn(run.out, n, name)
		return vals, nil, nil, err
	}
	return nil, nil, nil, &EngineError{Msg: fmt.Sprintf("%s: unknown file contract %q", name, run.contract)}
}

// readOutputColumn reads column col of a dedicated engine's output CSV:
// by position (exactly n rows), or, when keys is given and the output has
// `sequence` and `smiles` columns, by matching each input row's (sequence,
// smiles) pair; an input row without a matching output row gets no value.
func readOutputColumn(path, col string, n int, keys [][2]string, name string) ([]*float64, error) {
	bad := func(msg string, err error) ([]*float64, error) {
		return nil, &EngineError{Msg: name + " " + msg, Err: err}
	}
	f, err := os.Open(path)
	if err != nil {
		return bad("output file could not be read.", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if err != nil {
		return bad("output file could not be read.", err)
	}
	colIdx := map[string]int{}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if _, dup := colIdx[h]; !dup {
			colIdx[h] = i
		}
	}
	vi, ok := colIdx[col]
	if !ok {
		return bad(fmt.Sprintf("result mapping failed: output has no %q column.", col), nil)
	}
	si, hasSeq := colIdx["sequence"]
	mi, hasSmiles := colIdx["smiles"]
	byKey := keys != nil && hasSeq && hasSmiles
	cell := func(rec []string, i int) string {
		if i < len(rec) {
			return rec[i]
		}
		return ""
	}
	var vals []*float64
	matched := map[[2]string]*float64{}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return bad("returned an invalid prediction result.", err)
		}
		v := parseCell(cell(rec, vi))
		if byKey {
			matched[[2]string{cell(rec, si), cell(rec, mi)}] = v
			continue
		}
		vals = append(vals, v)
	}
	if byKey {
		vals = make([]*float64, n)
		for k, key := range keys {
			vals[k] = matched[key]
		}
		return vals, nil
	}
	if len(vals) != n {
		return bad(fmt.Sprintf("produced %d prediction(s) for %d input(s).", len(vals), n), nil)
	}
	return vals, nil
}

// parseCell reads one output cell; empty, "none", "nan", "null" and values
// that are not finite numbers count as missing.
func parseCell(s string) *float64 {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "", "none", "nan", "null":
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}
