package methods

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// FuzzEngineOutputs feeds arbitrary bytes to the readers of every engine
// output (the generic engine's JSON, the dedicated engines' CSVs and method
// L's TSV): they return values
// or an error, never panic, and never more or fewer values than rows.
func FuzzEngineOutputs(f *testing.F) {
	f.Add([]byte(`{"predictions":[1,"2",null,"nan"],"invalid_indices":[9,-1],"invalid_reasons":{"1":"x","z":"y"}}`), uint8(4))
	f.Add([]byte("[1.5, \"none\", 1e999]"), uint8(3))
	f.Add([]byte(`{"predictions":[1,2],"uncertainties":[{"sd_total":0.4,"sd_aleatoric":0.3,"sd_epistemic":-1},null]}`), uint8(2))
	f.Add([]byte(`{"predictions":[1],"uncertainties":[{"sd_total":"x"},{}]}`), uint8(1))
	f.Add([]byte(`{"predictions":[1,2],"SD_total":[0.4,null],"SD_aleatoric":["x",0.1],"v":[-1,4]}`), uint8(0x82))
	f.Add([]byte("smiles,sequence,y_pred\nCCO,MK,1\n\"a,b\",MK,nan\n"), uint8(2))
	f.Add([]byte("Predicted Value\n1\n2\n"), uint8(2))
	f.Add([]byte("\ufeffkcat [s^(-1)],x\n3\n\"unterminated\n"), uint8(1))
	f.Add([]byte("Substrate Name\tSubstrate SMILES\tProtein Sequence\tKcat value (1/s)\nnoname\tCCO\tMK\t1.5\r\nnoname\tC\n"), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, n uint8) {
		path := filepath.Join(t.TempDir(), "out")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		rows := int(n & 0x0f)
		keys := make([][2]string, rows)
		for i := range keys {
			keys[i] = [2]string{"MK", "CCO"}
		}
		var src *UncertaintySource
		if n&0x80 != 0 {
			src = &UncertaintySource{Total: "SD_total", Aleatoric: "SD_aleatoric", Epistemic: "v", Form: UncertaintyVar}
		}
		if vals, reasons, uncs, err := readEngineOutput(path, rows, "M", src); err == nil {
			if len(vals) != rows || (uncs != nil && len(uncs) != rows) {
				t.Fatalf("json: %d values, %d uncertainties for %d rows", len(vals), len(uncs), rows)
			}
			for _, u := range uncs {
				if u != nil && (u.Total < 0 || math.IsNaN(u.Total) || math.IsInf(u.Total, 0)) {
					t.Fatalf("json: uncertainty %+v", u)
				}
			}
			for i := range reasons {
				if i < 0 || i >= rows {
					t.Fatalf("json: reason for row %d of %d", i, rows)
				}
			}
		}
		if vals, err := readTSVColumn(path, rows, "M"); err == nil && len(vals) != rows {
			t.Fatalf("tsv: %d values for %d rows", len(vals), rows)
		}
		for _, col := range []string{colPredictedValue, colMethodDKcat, colMethodAPred} {
			for _, k := range [][][2]string{nil, keys} {
				if vals, err := readOutputColumn(path, col, rows, k, "M"); err == nil && len(vals) != rows {
					t.Fatalf("csv %q: %d values for %d rows", col, len(vals), rows)
				}
			}
		}
	})
}

// TestJSONRowsCarrySeqID: a method that keeps files per sequence (H, K)
// gets each row's seq_id in its JSON input, so its program never keys a
// file by row position; a method that does not ask for it (B) gets none.
func TestJSONRowsCarrySeqID(t *testing.T) {
	for key, want := range map[string]bool{"H": true, "K": true, "G": true, "I": true, "B": false} {
		d, _ := Default().Get(key)
		dir := t.TempDir()
		rows := []EngineRow{{Seq: "MKT", Kwargs: map[string]string{"x": "CCO"}, SeqID: "abc123"}, {Seq: "MKV", SeqID: "def456"}}
		run, err := writeEngineInput(context.Background(), d, CommandRequest{JobID: "j1", Target: string(d.Supports[0]), Rows: rows, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		var in EngineInput
		raw, _ := os.ReadFile(run.in)
		if err := json.Unmarshal(raw, &in); err != nil {
			t.Fatal(err)
		}
		for i, r := range in.Rows {
			if got := r["seq_id"]; (got == rows[i].SeqID) != want || (!want && got != "") {
				t.Errorf("%s row %d: seq_id %q", key, i, got)
			}
		}
	}
}
