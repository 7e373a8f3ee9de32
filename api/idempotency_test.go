package api

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

func (h *harness) submitCSVKey(ip, key, idem, content string, fields ...string) resp {
	body, ct := multipartBody(h.t, "input.csv", content, fields...)
	return h.do("POST", "/api/v1/submit/", ip, key, body, "Content-Type", ct, "Idempotency-Key", idem)
}

var kcatB = []string{"targets", `["kcat"]`, "methods", `{"kcat":"B"}`}

// TestIdempotentSubmit: the same key and request give the same job, charged
// once, whatever the order of the form's fields; a different
// request with the key gets 422; another API key's same Idempotency-Key is
// its own; after 24 hours the key submits anew.
func TestIdempotentSubmit(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip, ip2 = "198.51.100.40", "198.51.100.41"
		key, key2 := h.newKey(ip), h.newKey(ip2)
		r := h.submitCSVKey(ip, key, "k-1", csvRows(5), kcatB...)
		wantStatus(t, r, 201)
		id := r.json(t)["jobId"].(string)
		if r.Header().Get("Idempotent-Replayed") != "" {
			t.Fatal("first submit marked replayed")
		}
		// Same request, fields in another order: same job, no charge.
		r = h.submitCSVKey(ip, key, "k-1", csvRows(5), "methods", `{"kcat":"B"}`, "targets", `["kcat"]`)
		wantStatus(t, r, 201)
		b := r.json(t)
		if b["jobId"] != id || r.Header().Get("Idempotent-Replayed") != "true" || b["status"] != "Pending" {
			t.Fatalf("replay %s %v", r.Body, r.Header())
		}
		if q := b["quota"].(map[string]any); q["used"] != 5.0 {
			t.Fatalf("replay quota %v", q)
		}
		// Different rows or options with the key: 422, nothing charged.
		r = h.submitCSVKey(ip, key, "k-1", csvRows(6), kcatB...)
		wantStatus(t, r, 422)
		if msg := r.json(t)["error"].(string); !strings.Contains(msg, "Idempotency-Key was already used for a different request") {
			t.Fatalf("422: %s", msg)
		}
		wantStatus(t, h.submitCSVKey(ip, key, "k-1", csvRows(5), "targets", `["kcat"]`, "methods", `{"kcat":"C"}`), 422)
		// Another API key with the same Idempotency-Key: its own job.
		r = h.submitCSVKey(ip2, key2, "k-1", csvRows(5), kcatB...)
		wantStatus(t, r, 201)
		if r.json(t)["jobId"] == id {
			t.Fatal("another key got this key's job")
		}
		keyID := authKeyID(t, st, ip)
		if used, _ := st.QuotaUsed(t.Context(), keyID, store.QuotaDay(t0)); used != 5 {
			t.Fatalf("used %d, want 5", used)
		}
		var n int64
		st.DB.Model(&store.Job{}).Where("key_id = ?", keyID).Count(&n)
		if n != 1 || len(h.starter.started()) != 2 {
			t.Fatalf("%d jobs, %d started", n, len(h.starter.started()))
		}
		// 24 hours later the key is free again (and expired rows go).
		h.clock.Set(t0.Add(store.IdempotencyWindow + time.Minute))
		r = h.submitCSVKey(ip, key, "k-1", csvRows(6), kcatB...)
		wantStatus(t, r, 201)
		if r.json(t)["jobId"] == id {
			t.Fatal("expired key replayed")
		}
		h.clock.Set(t0.Add(2*store.IdempotencyWindow + 2*time.Minute))
		if n, err := st.ExpireIdempotencyKeys(t.Context(), h.clock.Now()); err != nil || n != 2 {
			t.Fatalf("expired %d %v", n, err)
		}
	})
}

// TestIdempotencyKeyRules: a malformed header is refused before anything is
// read; a refused charge (429) and a refused input (400) leave the key free.
func TestIdempotencyKeyRules(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.DefaultDailyQuota = 10 })
		const ip = "198.51.100.42"
		key := h.newKey(ip)
		for _, bad := range []string{" ", strings.Repeat("x", 256), "tab\tkey", "é"} {
			r := h.submitCSVKey(ip, key, bad, csvRows(1), kcatB...)
			wantStatus(t, r, 400)
			if !strings.Contains(r.json(t)["error"].(string), "Idempotency-Key") {
				t.Fatalf("%q: %s", bad, r.Body)
			}
		}
		wantStatus(t, h.submitCSVKey(ip, key, "k", csvRows(11), kcatB...), 429)
		wantStatus(t, h.submitCSVKey(ip, key, "k", "Protein Sequence\n", kcatB...), 400)
		r := h.submitCSVKey(ip, key, "k", csvRows(3), kcatB...)
		wantStatus(t, r, 201)
		var n int64
		st.DB.Model(&store.IdempotencyKey{}).Count(&n)
		if n != 1 {
			t.Fatalf("%d idempotency rows, want 1", n)
		}
	})
}

// TestIdempotentSubmitConcurrent: 50 concurrent submits with one key create
// one job, charged once, started once; every one answers 201 with its id.
func TestIdempotentSubmitConcurrent(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip, clients = "198.51.100.43", 50
		key := h.newKey(ip)
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			ids = map[string]int{}
		)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := h.submitCSVKey(ip, key, "same-key", csvRows(20), kcatB...)
				mu.Lock()
				defer mu.Unlock()
				if r.Code != http.StatusCreated {
					t.Errorf("submit %d: %s", r.Code, r.Body)
					return
				}
				ids[r.json(t)["jobId"].(string)]++
			}()
		}
		wg.Wait()
		var n int64
		st.DB.Model(&store.Job{}).Count(&n)
		used, _ := st.QuotaUsed(t.Context(), authKeyID(t, st, ip), store.QuotaDay(t0))
		if len(ids) != 1 || n != 1 || used != 20 || len(h.starter.started()) != 1 {
			t.Fatalf("ids %v, %d jobs, %d used, %d started", ids, n, used, len(h.starter.started()))
		}
		for id := range ids {
			if j, err := st.Job(t.Context(), id); err != nil || j.Status != store.JobPending {
				t.Fatalf("job %+v %v", j, err)
			}
		}
	})
}

// TestIdempotentRetryFinishesCutOffSubmit: a submit charged and stored but
// never queued (the api died before answering) is finished by the retry
// with the same key: same job, input written, workflow started, one charge.
// A submit the reconciler undid frees the key: the retry submits anew.
func TestIdempotentRetryFinishesCutOffSubmit(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "198.51.100.44"
		key := h.newKey(ip)
		// The cut-off submit: what the first transaction leaves.
		h.starter.err = errQueueDown
		r := h.submitCSVKey(ip, key, "cut", csvRows(4), kcatB...)
		wantStatus(t, r, 503)
		// A 503 with "nothing was charged" releases the key.
		var n int64
		st.DB.Model(&store.IdempotencyKey{}).Count(&n)
		if n != 0 {
			t.Fatalf("%d idempotency rows after a refunded submit", n)
		}
		h.starter.err = nil
		keyID := authKeyID(t, st, ip)
		// The refused submit left no job; stand in for another one that a
		// kill left charged (its 4 rows).
		st.DB.Exec("UPDATE quota_usage SET used = 4")
		r = h.submitCSVKey(ip, key, "cut", csvRows(4), kcatB...)
		wantStatus(t, r, 201) // a fresh submit: the key was released
		first := r.json(t)["jobId"].(string)
		// Now cut off the fresh one by hand and retry.
		st.DB.Exec("UPDATE jobs SET status = ? WHERE id = ?", store.JobSubmitting, first)
		_ = os.Remove(h.srv.mediaPath("jobs/" + first + "/input.csv"))
		h.starter.mu.Lock()
		h.starter.ids = nil
		h.starter.mu.Unlock()
		r = h.submitCSVKey(ip, key, "cut", csvRows(4), kcatB...)
		wantStatus(t, r, 201)
		if r.json(t)["jobId"] != first {
			t.Fatalf("retry got %s, want %s", r.Body, first)
		}
		if got, err := st.Job(t.Context(), first); err != nil || got.Status != store.JobPending {
			t.Fatalf("job %+v %v", got, err)
		}
		if _, err := os.Stat(h.srv.mediaPath("jobs/" + first + "/input.csv")); err != nil {
			t.Fatalf("input not written: %v", err)
		}
		if got := h.starter.started(); len(got) != 1 || got[0] != first {
			t.Fatalf("started %v", got)
		}
		if used, _ := st.QuotaUsed(t.Context(), keyID, store.QuotaDay(t0)); used != 8 {
			t.Fatalf("used %d, want 8 (the hand-made job 4 + this one 4)", used)
		}
		// The reconciler undoes a cut-off submit older than its bound and
		// frees its key: the next retry is a clean new submit.
		st.DB.Exec("UPDATE jobs SET status = ? WHERE id = ?", store.JobSubmitting, first)
		_ = os.Remove(h.srv.mediaPath("jobs/" + first + "/input.csv"))
		h.clock.Set(t0.Add(time.Hour))
		if _, undone, err := h.srv.ReconcileSubmits(t.Context()); err != nil || undone < 1 {
			t.Fatalf("reconcile undone %d %v", undone, err)
		}
		r = h.submitCSVKey(ip, key, "cut", csvRows(4), kcatB...)
		wantStatus(t, r, 201)
		if r.json(t)["jobId"] == first {
			t.Fatal("a refunded job was replayed")
		}
	})
}

// TestReplayOfReconciledSubmitLeavesNoInput: a retry that finishes a
// cut-off submit while the reconciler undoes it (the job removed between
// the retry's input write and its queueing) answers 503 and leaves no
// orphaned job folder behind, as the first submit's own path does.
func TestReplayOfReconciledSubmitLeavesNoInput(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "198.51.100.45"
		key := h.newKey(ip)
		r := h.submitCSVKey(ip, key, "gone", csvRows(3), kcatB...)
		wantStatus(t, r, 201)
		id := r.json(t)["jobId"].(string)
		// Cut it off: Submitting, no input, never started.
		st.DB.Exec("UPDATE jobs SET status = ? WHERE id = ?", store.JobSubmitting, id)
		_ = os.Remove(h.srv.mediaPath("jobs/" + id + "/input.csv"))
		h.starter.mu.Lock()
		h.starter.ids = nil
		h.starter.mu.Unlock()
		// The reconciler undoes it while the retry is between its input
		// write and its start.
		h.starter.onStart = func(jid string) {
			if _, err := st.AbandonSubmit(context.Background(), jid, "", true, t0); err != nil {
				t.Errorf("abandon: %v", err)
			}
		}
		r = h.submitCSVKey(ip, key, "gone", csvRows(3), kcatB...)
		wantStatus(t, r, 503)
		if _, err := os.Stat(h.srv.mediaPath("jobs/" + id)); !os.IsNotExist(err) {
			t.Fatalf("the removed job's folder is left behind: %v", err)
		}
	})
}
