package activities

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestNativeRowListsStoredOncePerRow: a method D row with three candidate
// sequences sends the same Substrates and Products lists for each; rows.json
// holds them once for the row, and Predict gives every candidate
// its whole lists back (the engine's value counts the substrates it got).
func TestNativeRowListsStoredOncePerRow(t *testing.T) {
	h := newPredictHarness(t, testenv.OpenStore(t, store.SQLite), nil, "")
	subs := make([]string, 200)
	for i := range subs {
		subs[i] = "CC" + strings.Repeat("O", i%5+1)
	}
	prods := subs[:100]
	seq := "MKTAYIAKQRQISFVKSHFSRQ"
	csvText := "Protein Sequence,Substrates,Products\n" + seq + ";" + seq + "A;" + seq + "AA," + strings.Join(subs, ";") + "," + strings.Join(prods, ";") + "\n"
	h.submit("job-rowinputs", map[string]string{"kcat": "D"}, false, csvText)
	dir, _ := h.a.stageDir("job-rowinputs", 0)
	raw, err := os.ReadFile(filepath.Join(dir, "rows.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The lists as JSON arrays and as the kwargs' cells, once: about twice
	// their bytes; per candidate it would be six times.
	lists := len(strings.Join(subs, ";")) + len(strings.Join(prods, ";"))
	if len(raw) > 3*lists {
		t.Fatalf("rows.json holds %d bytes for %d bytes of lists and 3 candidates", len(raw), lists)
	}
	if !strings.Contains(string(raw), `"shared":true`) || !strings.Contains(string(raw), `"inputs":[`) {
		t.Fatalf("rows.json does not share the row's lists: %.300s", raw)
	}
	if _, err := h.env.ExecuteActivity(h.a.Predict, StageRef{JobID: "job-rowinputs", StageIndex: 0}); err != nil {
		t.Fatal(err)
	}
	sr, err := h.a.loadStageRows("job-rowinputs", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(sr.Units) != 3 {
		t.Fatalf("%d units", len(sr.Units))
	}
	for _, u := range sr.Units {
		if u.Shared || len(u.Substrates) != 200 || len(u.Products) != 100 || u.Kwargs["substrates"] == "" {
			t.Fatalf("unit not restored: shared %v, %d substrates, %d products", u.Shared, len(u.Substrates), len(u.Products))
		}
	}
	lite, err := h.a.loadStageRowsLite("job-rowinputs", 0)
	if err != nil || len(lite.Units) != 3 || len(lite.Units[2].Substrates) != 200 {
		t.Fatalf("Finalize's reader: %v %+v", err, lite.Units)
	}
}
