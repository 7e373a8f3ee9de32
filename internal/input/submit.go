package input

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/units"
)

// Submission is a submit request that passed the submit checks 1–11
// (docs/input.md, "The rules in order"); the API
// then reserves quota for len(Table.Rows) predictions (step 12).
type Submission struct {
	Options Options
	// Table is the parsed input with all-empty rows dropped.
	Table *Table
}

// ValidateSubmit runs the submit validation pipeline, steps 1–11 in
// order, the first failure winning: the options (ValidateOptions), then the
// table from load (step 8: a CSV error reads "Could not read CSV file: …"),
// the required columns (9), and the column-emptiness rule for Substrate (10)
// and Protein Sequence (11). load is called only when the options are valid.
// Errors are *Error.
func ValidateSubmit(cat *methods.Catalogue, raw RawOptions, load func() (*Table, error)) (*Submission, error) {
	opts, err := ValidateOptions(cat, raw)
	if err != nil {
		return nil, err
	}
	t, err := load()
	if err != nil {
		if d := CSVDetail(err); d != "" {
			return nil, &Error{Kind: KindInvalid, Msg: "Could not read CSV file: " + d, Err: err}
		}
		if e, ok := AsError(err); ok {
			return nil, e
		}
		return nil, &Error{Kind: KindInvalid, Msg: "Could not read CSV file.", Err: err}
	}
	if err := CheckColumns(cat, opts, t); err != nil {
		return nil, err
	}
	if len(t.Rows) == 0 {
		// A header-only CSV (or rows that are all empty) would create a
		// job with nothing to predict.
		return nil, invalidf("The input has no data rows: add at least one row below the header.")
	}
	if t.Has(ColSubstrate) {
		if err := CheckEmptiness(t, ColSubstrate); err != nil {
			return nil, err
		}
	}
	if err := CheckEmptiness(t, ColProteinSequence); err != nil {
		return nil, err
	}
	return &Submission{Options: opts, Table: t}, nil
}

// CheckColumns is step 9 with the substrate-list rules: no
// `Products` without `Substrates`; then `Protein Sequence` and every column
// the selected methods read must be present, where a method reading
// `Substrate` also takes a `Substrates` list. A table with both `Substrate`
// and `Substrates` is accepted as the older wire reads it (kinflow differs
// from the reference's 400 here, so that older clients, which send every
// column for every method, keep working): single-substrate methods read
// `Substrate`, the full-reaction method `Substrates` and `Products`. The message lists the missing ones,
// `Protein Sequence` first and the rest alphabetically:
// "Missing required columns: Protein Sequence, Substrate or Substrates".
func CheckColumns(cat *methods.Catalogue, opts Options, t *Table) error {
	if t.Has(ColProducts) && !t.Has(ColSubstrates) {
		return invalidf("'Products' requires a 'Substrates' column.")
	}
	need := map[string]bool{ColProteinSequence: true}
	eitherSubstrate := false
	for _, target := range opts.Targets {
		if m, ok := methodInfo(cat, opts.Methods[target]); ok {
			for _, c := range m.RequiredColumns {
				if c == ColSubstrate {
					eitherSubstrate = true
					continue
				}
				need[c] = true
			}
		}
	}
	var missing []string
	for c := range need {
		if c != ColProteinSequence && !t.Has(c) {
			missing = append(missing, c)
		}
	}
	if eitherSubstrate && !need[ColSubstrates] && !t.Has(ColSubstrate) && !t.Has(ColSubstrates) {
		missing = append(missing, ColSubstrate+" or "+ColSubstrates)
	}
	sort.Strings(missing)
	if !t.Has(ColProteinSequence) {
		missing = append([]string{ColProteinSequence}, missing...)
	}
	if len(missing) > 0 {
		return invalidf("Missing required columns: %s", strings.Join(missing, ", "))
	}
	return nil
}

// productsHint ends every Products error, verbatim (the reference's text).
const productsHint = "Products must be semicolon-separated SMILES or InChI strings."

// CheckProducts is the submit-time check of a `Products` column: every row needs a non-empty list of valid SMILES/InChI. The first
// bad row wins: "Invalid Products value at row N[, product P]: …. Products
// must be semicolon-separated SMILES or InChI strings." (N is the 1-based
// data row, P the 1-based product). A product RDKit could not check in time
// passes here; the job skips the row if it is bad. An error other than
// *Error is returned only when ctx ends.
func CheckProducts(ctx context.Context, chem *Chemistry, t *Table) error {
	c := t.Col(ColProducts)
	if c < 0 {
		return nil
	}
	toks := make([][]string, len(t.Rows))
	var all []string
	for i, r := range t.Rows {
		toks[i] = units.Split(r.Cells[c])
		all = append(all, toks[i]...)
	}
	verdict, unchecked, err := chem.ValidManyDetail(ctx, all)
	if err != nil {
		return err
	}
	for i := range t.Rows {
		if len(toks[i]) == 0 {
			return invalidf("Invalid Products value at row %d: the product list is empty. %s", i+1, productsHint)
		}
		for p, tok := range toks[i] {
			if !verdict[tok] && !unchecked[tok] {
				return invalidf("Invalid Products value at row %d, product %d: %s is not a valid SMILES or InChI. %s", i+1, p+1, strconv.Quote(tok), productsHint)
			}
		}
	}
	return nil
}

// CheckEmptiness is the column-emptiness rule (docs/input.md, "The rules in order") for
// column col. A cell
// is empty when missing or whitespace-only. With n rows and e empty: more
// than 90 % empty → "<col> column is empty"; more than 10 % and at most 10
// rows → "Rows r1, r2 have no <col> value" (r = original 0-based index + 2);
// more than 10 % and more than 10 rows → "<e> rows (<pct>%) have no <col>
// value"; otherwise (exactly 10 % included) it passes.
func CheckEmptiness(t *Table, col string) error {
	c := t.Col(col)
	n := len(t.Rows)
	if n == 0 {
		return nil
	}
	var emptyRows []int
	for _, r := range t.Rows {
		if c < 0 || strings.TrimSpace(r.Cells[c]) == "" {
			emptyRows = append(emptyRows, r.Index)
		}
	}
	e := len(emptyRows)
	// Integer forms of e/n > 0.9 and e/n > 0.1: exact, no float rounding.
	switch {
	case 10*e > 9*n:
		return invalidf("%s column is empty", col)
	case 10*e > n && e <= 10:
		nums := make([]string, e)
		for i, idx := range emptyRows {
			nums[i] = strconv.Itoa(idx + 2)
		}
		return invalidf("Rows %s have no %s value", strings.Join(nums, ", "), col)
	case 10*e > n:
		return invalidf("%d rows (%.1f%%) have no %s value", e, 100*float64(e)/float64(n), col)
	}
	return nil
}

// errNotCSV is returned by callers that check the upload's file name.
var errNotCSV = errors.New("not a .csv file")

// CheckUploadName is the contract's rule for the `file` field: its name must
// end with .csv, case-insensitively, on /validate/ and /submit/ alike.
func CheckUploadName(name string) error {
	if !strings.HasSuffix(strings.ToLower(name), ".csv") {
		return &Error{Kind: KindInvalid, Msg: fmt.Sprintf("The uploaded file must be a .csv file (got %q).", name), Err: errNotCSV}
	}
	return nil
}
