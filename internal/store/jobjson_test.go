package store_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestJobJSONColumns: a job's targets and methods are typed fields stored
// as the same JSON text as before (a JSON array and a JSON object in the
// text columns of 0001), read back decoded; a row whose text does not
// decode makes the read fail instead of giving an empty job. Both
// databases.
func TestJobJSONColumns(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
		j := &store.Job{ID: "jsoncols", KeyID: 7, Status: store.JobPending, RequestedRows: 1, SubmittedAt: now,
			Targets: []string{"kcat", "Km"}, Methods: map[string]string{"kcat": "B", "Km": "C"}}
		if err := s.CreateJob(ctx, j, nil); err != nil {
			t.Fatal(err)
		}
		var raw struct{ Targets, Methods string }
		if err := s.DB.Table("jobs").Select("targets, methods").Where("id = ?", j.ID).Scan(&raw).Error; err != nil {
			t.Fatal(err)
		}
		if raw.Targets != `["kcat","Km"]` || raw.Methods != `{"Km":"C","kcat":"B"}` {
			t.Fatalf("stored text %q %q", raw.Targets, raw.Methods)
		}
		got, err := s.Job(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Targets, j.Targets) || !maps.Equal(got.Methods, j.Methods) {
			t.Fatalf("read back %v %v", got.Targets, got.Methods)
		}
		if err := s.DB.Table("jobs").Where("id = ?", j.ID).Update("methods", "{not json").Error; err != nil {
			t.Fatal(err)
		}
		if _, err := s.Job(ctx, j.ID); err == nil || !strings.Contains(err.Error(), "invalid") {
			t.Fatalf("undecodable methods read without the error: %v", err)
		}
	})
}
