package input

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// JSONBody is a JSON request body of /validate/ or /submit/: the `data`
// table and every other top-level field, kept raw for option parsing.
type JSONBody struct {
	// Fields holds every top-level key except "data", as raw JSON.
	Fields map[string]json.RawMessage
	// Data is the parsed `data` table; nil when DataErr is set.
	Data *Table
	// DataErr is why `data` is unusable (missing, empty, not a list of
	// objects, too many rows). It is kept, not returned, so that the submit
	// pipeline can report option errors first (the table is its step 8,
	// docs/input.md, "The rules in order").
	DataErr *Error
}

// errBadJSON is the answer to a body that is not JSON, or not an object.
func errBadJSON(cause error) *Error {
	return &Error{Kind: KindInvalid, Msg: "Invalid JSON body: expected a JSON object.", Err: cause}
}

// errData is the contract's answer to a missing, empty or non-list `data`.
func errData(detail string) *Error {
	return invalidf("'data' must be a non-empty list of row objects%s.", detail)
}

// ParseJSONBody reads a JSON request body in one streaming pass. The body
// must be one JSON object; its `data` array is turned into a Table directly
// (column set = union of keys in first-seen order) without holding a
// second copy of the rows. Values become cell text: strings as they are,
// numbers in shortest form, true/false as "true"/"false", null as a missing
// value, arrays and objects as compact JSON. A `data` with more than maxRows
// elements (maxRows <= 0: no limit) sets DataErr to a KindTooManyRows error.
// Errors are *Error: invalid JSON, a body that is not an object, or a body
// over the caller's http.MaxBytesReader limit (KindTooLarge).
func ParseJSONBody(r io.Reader, maxRows int) (*JSONBody, error) {
	dec := json.NewDecoder(r)
	body := &JSONBody{Fields: map[string]json.RawMessage{}}
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonErr(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errBadJSON(nil)
	}
	sawData := false
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, jsonErr(err)
		}
		key, _ := kt.(string)
		if key != "data" {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, jsonErr(err)
			}
			body.Fields[key] = raw
			continue
		}
		// A repeated "data" key: the last one wins, as in Python's json.
		sawData = true
		t, dataErr, err := decodeData(dec, maxRows)
		if err != nil {
			return nil, jsonErr(err)
		}
		body.Data, body.DataErr = t, dataErr
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, jsonErr(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errBadJSON(err)
	}
	if !sawData {
		body.DataErr = errData("")
	}
	return body, nil
}

func jsonErr(err error) *Error {
	if e := readErr("", err); e.Kind == KindTooLarge {
		return e
	}
	return errBadJSON(err)
}

// decodeData reads one JSON value, the `data` field. err is a syntax or read
// error of the whole body; dataErr says the value is valid JSON but not a
// usable table (the rest of the value has then been consumed).
func decodeData(dec *json.Decoder, maxRows int) (t *Table, dataErr *Error, err error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		if ok {
			if err := skipRest(dec, 1); err != nil {
				return nil, nil, err
			}
		}
		return nil, errData(""), nil
	}
	t = &Table{}
	cols := &jsonColumns{index: map[string]int{}}
	var slab, scratch []string
	for i := 0; dec.More(); i++ {
		if dataErr != nil { // keep consuming to find the end of the body
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, nil, err
			}
			continue
		}
		if maxRows > 0 && i >= maxRows {
			dataErr = tooManyRows(maxRows)
			continue
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		if d, ok := tok.(json.Delim); !ok || d != '{' {
			if ok {
				if err := skipRest(dec, 1); err != nil {
					return nil, nil, err
				}
			}
			dataErr = errData(fmt.Sprintf(" (element %d is not an object)", i))
			continue
		}
		// Cells of this row by column index, in a scratch buffer that grows
		// as new keys appear; copied into slab storage once complete.
		scratch, dataErr, err = cols.readRow(dec, i, scratch)
		if err != nil {
			return nil, nil, err
		}
		if dataErr != nil { // the row's '}' was consumed by skipRest
			continue
		}
		if _, err := dec.Token(); err != nil { // '}'
			return nil, nil, err
		}
		if len(slab) < len(scratch) {
			slab = make([]string, max(cellSlab, len(scratch)))
		}
		cells := slab[:len(scratch):len(scratch)]
		slab = slab[len(scratch):]
		copy(cells, scratch)
		t.RawRowCount++
		if allEmpty(cells) {
			continue
		}
		t.Rows = append(t.Rows, Row{Index: i, Cells: cells})
	}
	if _, err := dec.Token(); err != nil { // ']'
		return nil, nil, err
	}
	if dataErr != nil {
		return nil, dataErr, nil
	}
	if t.RawRowCount == 0 {
		return nil, errData(""), nil
	}
	if len(cols.header) == 0 {
		return nil, errData(" (the rows have no columns)"), nil
	}
	for i := range t.Rows {
		for len(t.Rows[i].Cells) < len(cols.header) {
			t.Rows[i].Cells = append(t.Rows[i].Cells, "")
		}
	}
	t.finish(cols.header)
	return t, nil, nil
}

// jsonColumns are the columns of a `data` array, in order of first
// appearance.
type jsonColumns struct {
	header []string
	index  map[string]int
}

// readRow reads the members of element i (its '{' read) into scratch, one
// cell per column, adding the columns it brings. dataErr says the element
// is not usable (the rest of it, '}' included, has then been consumed);
// otherwise the '}' is left to read.
func (c *jsonColumns) readRow(dec *json.Decoder, i int, scratch []string) (_ []string, dataErr *Error, err error) {
	scratch = scratch[:0]
	for range c.header {
		scratch = append(scratch, "")
	}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		key, _ := kt.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, err
		}
		// The decoder has already replaced invalid bytes in a key with
		// U+FFFD, so a key is checked for that rune.
		if !utf8.Valid(raw) || strings.ContainsRune(key, utf8.RuneError) {
			return scratch, errData(fmt.Sprintf(" (element %d is not valid UTF-8)", i)), skipRest(dec, 1)
		}
		col, ok := c.index[key]
		if !ok {
			if len(c.header) >= MaxColumns {
				return scratch, tooManyColumns(fmt.Sprintf("element %d brings column %d", i, len(c.header)+1)), skipRest(dec, 1)
			}
			col = len(c.header)
			c.index[key] = col
			c.header = append(c.header, key)
			scratch = append(scratch, "")
		}
		scratch[col] = jsonCellText(raw)
	}
	return scratch, nil, nil
}

// skipRest consumes tokens until depth open delimiters have been closed.
func skipRest(dec *json.Decoder, depth int) error {
	for depth > 0 {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}

// jsonCellText renders one JSON value as the text of a table cell.
func jsonCellText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		if bytes.IndexByte(raw, '\\') < 0 {
			return string(raw[1 : len(raw)-1])
		}
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return s
		}
		return string(raw)
	case 'n':
		return ""
	case 't':
		return "true"
	case 'f':
		return "false"
	case '[', '{':
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err == nil {
			return b.String()
		}
		return string(raw)
	default:
		return formatJSONNumber(string(raw))
	}
}

// formatJSONNumber writes a JSON number in its shortest form: integers as
// written, other values in the shortest decimal that reads back the same
// float64 ("1.50" → "1.5", "1e3" → "1000", "1e-05" stays exponent form).
func formatJSONNumber(s string) string {
	if !strings.ContainsAny(s, ".eE") {
		return s
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return s
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e16 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
