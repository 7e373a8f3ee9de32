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
	"github.com/kinflow/kinflow/internal/embedding"
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

// TestBuildPlanCountsOnceAndPostCheck: the first plan records the stage's
// counts in its row; a post-check re-plans the first plan's seq ids without
// counting again; a post-check whose first plan file is gone plans the
// stage's sequences afresh. On both databases.
func TestBuildPlanCountsOnceAndPostCheck(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		h := newPredictHarness(t, s, nil, "")
		layout, err := embedding.NewLayout(h.a.Config.MediaRoot, "", "", "")
		if err != nil {
			t.Fatal(err)
		}
		h.a.Layout = layout
		const id = "jobplan01"
		h.submit(id, map[string]string{"Km": "A-H"}, false, fourRows)
		plan := func(post bool) PlanSummary {
			t.Helper()
			v, err := h.env.ExecuteActivity(h.a.BuildPlan, PlanInput{JobID: id, StageIndex: 0, PostCheck: post})
			if err != nil {
				t.Fatal(err)
			}
			var sum PlanSummary
			if err := v.Get(&sum); err != nil {
				t.Fatal(err)
			}
			return sum
		}
		counts := func() *int {
			st, err := s.Stage(ctx, id, 0)
			if err != nil {
				t.Fatal(err)
			}
			return st.CountSequences
		}
		first := plan(false)
		if first.NoSequences || first.Total == 0 || first.PlanFile == "" {
			t.Fatalf("first plan %+v", first)
		}
		if c := counts(); c == nil || *c != 4 {
			t.Fatalf("sequences counted %v, want 4", c)
		}
		// The post-check neither counts nor writes the counts again.
		if err := s.UpdateStage(ctx, id, 0, map[string]any{"count_rows": nil, "count_units": nil, "count_sequences": nil}); err != nil {
			t.Fatal(err)
		}
		if post := plan(true); post.Total != first.Total {
			t.Fatalf("post-check %+v, first %+v", post, first)
		}
		if c := counts(); c != nil {
			t.Fatalf("the post-check recorded counts: %d", *c)
		}
		// Its first plan's file gone, the post-check plans the stage afresh.
		if err := os.Remove(first.PlanFile); err != nil {
			t.Fatal(err)
		}
		if post := plan(true); post.NoSequences || post.Total != first.Total {
			t.Fatalf("post-check without the first plan %+v, first %+v", post, first)
		}
	})
}
