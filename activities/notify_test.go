package activities

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
	"github.com/kinflow/kinflow/internal/webhook"
)

// TestNotifyJob runs the NotifyJob activity against a real receiver on
// loopback: refused while private addresses are not allowed (not retried),
// delivered signed when they are, an error (retried by Temporal) on a 5xx;
// every attempt is a "webhook" job event, on both databases.
func TestNotifyJob(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		key := &store.APIKey{IPAddress: "192.0.2.9", KeyHash: "h-notify", KeySuffix: "abcdef", IsActive: true, CreatedAt: time.Now(), WebhookSecret: "whsec_test"}
		if err := s.DB.Create(key).Error; err != nil {
			t.Fatal(err)
		}
		var got struct {
			sig, delivery string
			body          []byte
		}
		fail := true
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got.sig, got.delivery = r.Header.Get(webhook.SignatureHeader), r.Header.Get(webhook.DeliveryHeader)
			got.body, _ = io.ReadAll(r.Body)
			if fail {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}))
		defer recv.Close()
		done := time.Date(2026, 11, 26, 20, 0, 0, 0, time.UTC)
		job := &store.Job{ID: "notifyjob1", KeyID: key.ID, Status: store.JobCompleted, SubmittedAt: done.Add(-time.Minute),
			CompletedAt: &done, RequestedRows: 3, RefundedRows: 1, Synthetic: true, NotifyURL: recv.URL + "/hook"}
		if err := s.CreateJob(ctx, job, nil); err != nil {
			t.Fatal(err)
		}
		cfg := &config.Config{}
		a := &Activities{Config: cfg, Store: s, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		var ts testsuite.WorkflowTestSuite
		env := ts.NewTestActivityEnvironment()
		env.RegisterActivity(a)
		in := NoticeInput{JobID: job.ID}

		if has, err := a.HasNotice(ctx, in); err != nil || !has {
			t.Fatalf("HasNotice: %v %v", has, err)
		}
		// Loopback is refused by default, and not retried.
		_, err := env.ExecuteActivity(a.NotifyJob, in)
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != ErrNoticeRefused || !ae.NonRetryable() || got.sig != "" {
			t.Fatalf("private address: %v (receiver saw %q)", err, got.sig)
		}
		// Allowed: a 5xx is a retryable error.
		cfg.WebhookAllowPrivate = true
		if _, err := env.ExecuteActivity(a.NotifyJob, in); err == nil || errors.As(err, &ae) && ae.NonRetryable() {
			t.Fatalf("5xx: %v", err)
		}
		// Then delivered, signed.
		fail = false
		if _, err := env.ExecuteActivity(a.NotifyJob, in); err != nil {
			t.Fatalf("deliver: %v", err)
		}
		if !webhook.Verify("whsec_test", got.sig, got.body, time.Now(), time.Minute) {
			t.Fatalf("signature %q over %s", got.sig, got.body)
		}
		var p webhook.Payload
		if err := json.Unmarshal(got.body, &p); err != nil || p.Type != "job.completed" || p.JobID != job.ID || p.ResultURL != "/api/v1/result/notifyjob1/" ||
			p.Charge == nil || p.Charge.RowsCharged != 3 || p.Charge.RowsRefunded != 1 || p.CompletedAt != "2026-11-26T20:00:00Z" || !p.Synthetic {
			t.Fatalf("payload %s", got.body)
		}
		// The delivery id, in the header and the signed body: the one of
		// this job's end, the same on each attempt.
		if id := NoticeDeliveryID(job.ID, "job.completed"); p.DeliveryID != id || got.delivery != id || !strings.HasPrefix(id, "dlv_") ||
			NoticeDeliveryID("notifyjob2", "job.completed") == id || NoticeDeliveryID(job.ID, "job.failed") == id {
			t.Fatalf("delivery id %q, header %q", p.DeliveryID, got.delivery)
		}
		var evs []store.JobEvent
		if err := s.DB.Where("job_id = ? AND kind = ?", job.ID, EventWebhook).Order("id").Find(&evs).Error; err != nil {
			t.Fatal(err)
		}
		if len(evs) != 3 || !evs[0].Failed || !evs[1].Failed || !evs[2].Completed || evs[2].Reason != "webhook_delivered" {
			t.Fatalf("events %+v", evs)
		}
		// A job without a notify URL: nothing to do.
		other := &store.Job{ID: "notifyjob2", KeyID: key.ID, Status: store.JobFailed, SubmittedAt: done}
		if err := s.CreateJob(ctx, other, nil); err != nil {
			t.Fatal(err)
		}
		if has, err := a.HasNotice(ctx, NoticeInput{JobID: other.ID}); err != nil || has {
			t.Fatalf("HasNotice without a URL: %v %v", has, err)
		}
	})
}
