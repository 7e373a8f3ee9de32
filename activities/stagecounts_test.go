package activities

import (
	"path/filepath"
	"testing"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/units"
)

// TestWriteStageCounts: a stage's counts are its rows, its units that are
// sent, and the distinct sequences among them (a sequence shared by rows,
// substrates or candidates counts once; skipped units count nowhere).
func TestWriteStageCounts(t *testing.T) {
	a := &Activities{Config: &config.Config{MediaRoot: t.TempDir()}}
	sr := jobfiles.StageRows{
		Shapes: make([]units.Row, 4),
		Units: []units.Unit{
			{Row: 0, Seq: "MKV", Substrate: 0}, {Row: 0, Seq: "MKV", Substrate: 1},
			{Row: 1, Seq: "MKW"}, {Row: 2, Seq: "MKA", Skip: "Invalid"}, {Row: 3, Seq: "MKV"},
		},
	}
	const id = "AbCdEfGhIjKlMnOpQrStUv"
	if err := a.writeStageCounts(id, 1, sr); err != nil {
		t.Fatal(err)
	}
	var got StageCounts
	if err := fsutil.ReadJSON(filepath.Join(a.Config.MediaRoot, "jobs", id, "work", "stage-1", StageCountsFile), &got); err != nil {
		t.Fatal(err)
	}
	if got != (StageCounts{Rows: 4, Sequences: 2, Units: 4}) {
		t.Fatalf("counts %+v", got)
	}
	if err := a.writeStageCounts("../x", 0, sr); err == nil {
		t.Fatal("a bad job id became a path")
	}
}
