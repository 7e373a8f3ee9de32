package e2e

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/testenv"
)

// TestPostgresOutageUnderRunningJobs: with Postgres as the
// application database (a private server: the shared one stays up), 50 jobs
// run and the database is stopped for 60 s. Once it is back every job
// completes: none fails for the outage alone, none is left Processing,
// and the quota is exact.
func TestPostgresOutageUnderRunningJobs(t *testing.T) {
	pg := testenv.StartPrivatePostgres(t)
	s := newStack(t, map[string]string{"KINFLOW_DATABASE_URL": pg.URL, "KINFLOW_DEFAULT_DAILY_QUOTA": "1000000"}, nil)
	st, keyID := s.openStoreAndKey(t)
	methods := map[string]string{"kcat": "B"}
	// The jobs queue while no worker runs, then all start at once.
	s.stopRole("worker")
	var ids []string
	for i := range 50 {
		// New sequences each: the jobs compute embeddings, so they are
		// still running when the database goes.
		ids = append(ids, s.submit(csvRows(randSeed()+uint64(i), 20, 200), []string{"kcat"}, methods))
	}
	s.start("worker")
	var running, done int64
	for deadline := time.Now().Add(2 * time.Minute); done < 3 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		st.DB.Raw("SELECT COUNT(*) FROM jobs WHERE status IN ('Completed','Failed')").Scan(&done)
	}
	st.DB.Raw("SELECT COUNT(*) FROM jobs WHERE status IN ('Pending','Processing')").Scan(&running)
	pg.Stop()
	stopped := time.Now()
	t.Logf("database stopped with %d jobs running, %d finished", running, done)
	outage := 60 * time.Second
	// KINFLOW_TEST_PG_OUTAGE_SECONDS lengthens it by hand: past about 90 s
	// (the 8 attempts the bookkeeping steps once had) only the ride-out
	// keeps jobs alive.
	if n, err := strconv.Atoi(os.Getenv("KINFLOW_TEST_PG_OUTAGE_SECONDS")); err == nil && n > 0 {
		outage = time.Duration(n) * time.Second
	}
	time.Sleep(outage)
	pg.Start()
	t.Logf("database back after %.0f s", time.Since(stopped).Seconds())
	back := time.Now()
	completed := 0
	for _, id := range ids {
		got := s.waitDone(id, 5*time.Minute-time.Since(back))
		if got.Status != "Completed" {
			t.Errorf("job %s: %s %q", id, got.Status, got.Error)
			continue
		}
		completed++
	}
	t.Logf("%d/50 jobs completed, the last %.0f s after the database came back", completed, time.Since(back).Seconds())
	quotaExact(t, st, keyID)
	if running == 0 {
		t.Fatal("no job was running when the database stopped")
	}
}
