package activities

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestJobFailedForAnAbsentMediaRoot: a job whose steps gave up on a media
// root that stayed away (the rideout error, wrapped as a stage's failure
// is, beside a server path) is recorded Failed with the one storage
// sentence, naming no path, and every row refunded. On both databases.
func TestJobFailedForAnAbsentMediaRoot(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		h := newPredictHarness(t, s, nil, "")
		h.submit("away1", map[string]string{"kcat": "B"}, true, rowsCSV("MKTAYIAK", "MKTAYIAKQ", "MKTAYI"))
		s.DB.Model(&store.Job{}).Where("id = ?", "away1").Update("requested_rows", 3)
		if ok, _, err := s.ReserveQuota(ctx, 1, store.QuotaDay(time.Now()), 3, 1000); !ok || err != nil {
			t.Fatal(ok, err)
		}
		msg := "activity error (type: PrepareInput): read /srv/kinflow/media/jobs/away1/input.csv: media root unavailable: the media root is not there (moved, unmounted or not created); the step is retried while its retry policy allows"
		if _, err := h.env.ExecuteActivity(h.a.Finalize, FinalizeInput{JobID: "away1", Failed: true, Message: msg}); err != nil {
			t.Fatal(err)
		}
		job, err := s.Job(ctx, "away1")
		if err != nil {
			t.Fatal(err)
		}
		if job.Status != store.JobFailed || job.ErrorMessage != StorageUnavailableMessage || strings.Contains(job.ErrorMessage, "/srv") ||
			job.RefundedRows != 3 || quotaUsedToday(t, s) != 0 {
			t.Fatalf("job %s %q, refunded %d, quota used %d", job.Status, job.ErrorMessage, job.RefundedRows, quotaUsedToday(t, s))
		}
	})
}
