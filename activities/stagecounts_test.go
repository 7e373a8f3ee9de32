package activities

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
	"github.com/kinflow/kinflow/internal/units"
)

// TestStageCountsInTheRow: a stage's counts are its rows, its units that are
// sent, and the distinct sequences among them (a sequence shared by rows,
// substrates or candidates counts once; skipped units count nowhere); they
// are recorded in the stage's row, and no counts.json is written. On both
// databases.
func TestStageCountsInTheRow(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		const id = "AbCdEfGhIjKlMnOpQrStUv"
		stages := []store.JobStage{{JobID: id, Index: 1, Target: "kcat", MethodKey: "B", Status: "running"}}
		if err := s.CreateJob(ctx, &store.Job{ID: id, Status: store.JobProcessing, SubmittedAt: time.Now().UTC()}, stages); err != nil {
			t.Fatal(err)
		}
		if st, err := s.Stage(ctx, id, 1); err != nil || st.CountRows != nil || st.CountSequences != nil {
			t.Fatalf("a new stage has counts: %+v %v", st, err)
		}
		media := t.TempDir()
		a := &Activities{Config: &config.Config{MediaRoot: media}, Store: s, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		sr := jobfiles.StageRows{
			Shapes: make([]units.Row, 4),
			Units: []units.Unit{
				{Row: 0, Seq: "MKV", Substrate: 0}, {Row: 0, Seq: "MKV", Substrate: 1},
				{Row: 1, Seq: "MKW"}, {Row: 2, Seq: "MKA", Skip: "Invalid"}, {Row: 3, Seq: "MKV"},
			},
		}
		seqs := sentSeqs(sr)
		if len(seqs) != 2 || seqs[0] != "MKV" || seqs[1] != "MKW" {
			t.Fatalf("sent sequences %v", seqs)
		}
		c := stageCounts(sr, seqs)
		if c != (StageCounts{Rows: 4, Sequences: 2, Units: 4}) {
			t.Fatalf("counts %+v", c)
		}
		if err := a.recordStageCounts(ctx, PlanInput{JobID: id, StageIndex: 1}, c); err != nil {
			t.Fatal(err)
		}
		st, err := s.Stage(ctx, id, 1)
		if err != nil {
			t.Fatal(err)
		}
		if st.CountRows == nil || *st.CountRows != 4 || st.CountUnits == nil || *st.CountUnits != 4 || st.CountSequences == nil || *st.CountSequences != 2 {
			t.Fatalf("stage row %+v %v %v", st.CountRows, st.CountUnits, st.CountSequences)
		}
		if _, err := os.Stat(filepath.Join(media, "jobs", id, "work", "stage-1", jobfiles.CountsFile)); !os.IsNotExist(err) {
			t.Fatalf("a counts.json was written: %v", err)
		}
	})
}
