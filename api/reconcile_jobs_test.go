package api

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
	"github.com/kinflow/kinflow/workflows"
)

// devServer starts a Temporal dev server of the test's own (the api
// package shares none) and stops it at the end.
func devServer(t *testing.T) client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath: testenv.TemporalPath(),
		LogLevel:     "error",
		ExtraArgs:    testenv.SearchAttributeArgs,
	})
	if err != nil {
		testenv.Unavailable(t, "Temporal dev server: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv.Client()
}

// TestJobReconcilerFailsJobsWhoseWorkflowClosed: jobs submitted
// through the API with real workflows on a real Temporal server (no worker,
// so they stay Pending). The workflow of one is terminated, as from the
// Temporal UI or CLI: a reconciler pass marks its job Failed with a reason
// and refunds its rows; the others are untouched. Two servers reconciling
// at once, and passes repeated, refund it exactly once. On both databases.
func TestJobReconcilerFailsJobsWhoseWorkflowClosed(t *testing.T) {
	tc := devServer(t)
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		ctx := t.Context()
		starter := workflows.Starter{Client: tc, TaskQueue: fmt.Sprintf("i33-no-worker-%d", time.Now().UnixNano())}
		withStarter := func(_ *config.Config, d *Deps) { d.Jobs = starter }
		h := newHarness(t, st, withStarter)
		h.clock.Set(time.Now())
		other := newHarness(t, st, withStarter)
		other.clock.Set(time.Now())
		const ip = "198.51.100.133"
		key := h.newKey(ip)
		rows := []int{2, 3, 4}
		var ids []string
		for _, n := range rows {
			csv := "Protein Sequence,Substrate\n" + strings.Repeat(seqA+",CCO\n", n)
			body, ct := multipartBody(t, "in.csv", csv, "targets", `["kcat"]`, "methods", `{"kcat":"B"}`)
			r := h.do("POST", "/api/v1/submit/", ip, key, body, "Content-Type", ct)
			wantStatus(t, r, 201)
			ids = append(ids, r.json(t)["jobId"].(string))
		}
		j0, _ := st.Job(ctx, ids[0])
		day := store.QuotaDay(j0.SubmittedAt)
		used := func() int64 {
			u, err := st.QuotaUsed(ctx, j0.KeyID, day)
			if err != nil {
				t.Fatal(err)
			}
			return u
		}
		if u := used(); u != 9 {
			t.Fatalf("quota used %d after submits, want 9", u)
		}
		// Nothing closed yet: passes change nothing.
		if n, err := h.srv.ReconcileJobs(ctx, JobReconcileBatch); err != nil || n != 0 {
			t.Fatalf("pass over running workflows: %d %v", n, err)
		}
		if err := tc.TerminateWorkflow(ctx, workflows.PredictionWorkflowID(ids[1]), "", "operator stop"); err != nil {
			t.Fatal(err)
		}
		// A job younger than JobReconcileMinAge is not asked about yet.
		if n, err := h.srv.ReconcileJobs(ctx, JobReconcileBatch); err != nil || n != 0 {
			t.Fatalf("pass over young jobs: %d %v", n, err)
		}
		if j, _ := st.Job(ctx, ids[1]); j.Status != store.JobPending {
			t.Fatalf("a job submitted a moment ago was reconciled: %s", j.Status)
		}
		later := h.clock.Now().Add(JobReconcileMinAge)
		h.clock.Set(later)
		other.clock.Set(later)
		// Batches of one walk the running jobs in turn: within three
		// passes each has been looked at. Two servers run them at once.
		var wg sync.WaitGroup
		total := make([]int, 2)
		for i, srv := range []*Server{h.srv, other.srv} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 4 {
					n, err := srv.ReconcileJobs(ctx, 1)
					if err != nil {
						t.Error(err)
					}
					total[i] += n
				}
			}()
		}
		wg.Wait()
		if total[0]+total[1] != 1 {
			t.Fatalf("jobs failed by the reconcilers: %v, want 1 in all", total)
		}
		j, err := st.Job(ctx, ids[1])
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != store.JobFailed || !strings.Contains(j.ErrorMessage, "terminated") || j.RefundedRows != 3 || j.CompletedAt == nil {
			t.Fatalf("terminated job: %s %q refunded %d", j.Status, j.ErrorMessage, j.RefundedRows)
		}
		if u := used(); u != 6 {
			t.Fatalf("quota used %d, want 6 (3 rows refunded once)", u)
		}
		for _, id := range []string{ids[0], ids[2]} {
			if j, _ := st.Job(ctx, id); j.Status != store.JobPending {
				t.Fatalf("job %s with a running workflow: %s", id, j.Status)
			}
		}
		// The status route shows it.
		r := h.do("GET", "/api/v1/status/"+ids[1]+"/", ip, key, nil)
		wantStatus(t, r, 200)
		if !strings.Contains(r.Body.String(), "Failed") || !strings.Contains(r.Body.String(), "terminated") {
			t.Fatalf("status: %s", r.Body)
		}
		// More passes refund nothing twice.
		for range 3 {
			if _, err := h.srv.ReconcileJobs(ctx, JobReconcileBatch); err != nil {
				t.Fatal(err)
			}
		}
		if u := used(); u != 6 {
			t.Fatalf("quota used %d after more passes, want 6", u)
		}
	})
}
