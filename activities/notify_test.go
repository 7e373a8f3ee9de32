package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
		// Run again (an attempt whose answer to Temporal was lost): it was
		// delivered, so nothing is sent twice.
		got.sig = ""
		if _, err := env.ExecuteActivity(a.NotifyJob, in); err != nil || got.sig != "" {
			t.Fatalf("after delivery: %v (receiver saw %q)", err, got.sig)
		}
		evs := webhookEvents(t, s, job.ID)
		if len(evs) != 3 || !evs[0].Failed || !evs[1].Failed || !evs[2].Completed || evs[2].Reason != "webhook_delivered" ||
			evs[2].Message != "attempt 3: HTTP 200" {
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

// webhookEvents are job jobID's "webhook" events, oldest first.
func webhookEvents(t *testing.T, s *store.Store, jobID string) []store.JobEvent {
	t.Helper()
	var evs []store.JobEvent
	if err := s.DB.Where("job_id = ? AND kind = ?", jobID, EventWebhook).Order("id").Find(&evs).Error; err != nil {
		t.Fatal(err)
	}
	return evs
}

// noticeFixture makes n keys, each with a job per name in jobs (Completed,
// notify URL url), and the activities with KINFLOW_NOTICE_PER_KEY perKey.
func noticeFixture(t *testing.T, s *store.Store, perKey int, url string, keys int, jobs ...string) (*Activities, []int64) {
	t.Helper()
	ctx := context.Background()
	done := time.Now().UTC().Truncate(time.Second)
	var ids []int64
	for k := range keys {
		key := &store.APIKey{IPAddress: fmt.Sprintf("192.0.2.%d", 20+k), KeyHash: fmt.Sprintf("h-cap-%d", k), KeySuffix: fmt.Sprintf("cap%03d", k),
			IsActive: true, CreatedAt: done, WebhookSecret: "whsec_cap"}
		if err := s.DB.Create(key).Error; err != nil {
			t.Fatal(err)
		}
		ids = append(ids, key.ID)
		for _, name := range jobs {
			job := &store.Job{ID: fmt.Sprintf("%s-k%d", name, k), KeyID: key.ID, Status: store.JobCompleted, SubmittedAt: done,
				CompletedAt: &done, RequestedRows: 1, NotifyURL: url}
			if err := s.CreateJob(ctx, job, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg := &config.Config{WebhookAllowPrivate: true, NoticePerKey: perKey}
	return &Activities{Config: cfg, Store: s, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, ids
}

// TestNotifyJobPerKeyCap: a key with KINFLOW_NOTICE_PER_KEY notices in
// flight on this worker gets its next one put off at once (a retryable
// NoticeKeyBusy error with a short NextRetryDelay, nothing sent, no event:
// no slot is held waiting), while another key's notice is delivered beside
// them; once the first is answered, the put-off one goes out.
func TestNotifyJobPerKeyCap(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		var mu sync.Mutex
		seen := map[string]int{}
		hold := make(chan struct{})
		entered := make(chan struct{}, 4)
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var p webhook.Payload
			body, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(body, &p)
			mu.Lock()
			seen[p.JobID]++
			mu.Unlock()
			if p.JobID == "capjob1-k0" {
				entered <- struct{}{}
				<-hold
			}
		}))
		defer recv.Close()
		a, _ := noticeFixture(t, s, 1, recv.URL+"/hook", 2, "capjob1", "capjob2")

		// Key 0's first notice is in flight: its receiver has not answered.
		first := make(chan error, 1)
		go func() { first <- a.NotifyJob(ctx, NoticeInput{JobID: "capjob1-k0"}) }()
		<-entered
		// Over the cap: put off at once, nothing sent, nothing recorded.
		t0 := time.Now()
		err := a.NotifyJob(ctx, NoticeInput{JobID: "capjob2-k0"})
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != ErrNoticeKeyBusy || ae.NonRetryable() ||
			ae.NextRetryDelay() < NoticeBusyDelay || ae.NextRetryDelay() >= 2*NoticeBusyDelay || ae.Category() != temporal.ApplicationErrorCategoryBenign {
			t.Fatalf("over the cap: %v", err)
		}
		if d := time.Since(t0); d > 2*time.Second {
			t.Fatalf("the put-off notice took %v: it waited", d)
		}
		if evs := webhookEvents(t, s, "capjob2-k0"); len(evs) != 0 {
			t.Fatalf("a put-off notice recorded %+v", evs)
		}
		// Another key is under its cap: delivered beside it.
		if err := a.NotifyJob(ctx, NoticeInput{JobID: "capjob1-k1"}); err != nil {
			t.Fatalf("another key: %v", err)
		}
		close(hold)
		if err := <-first; err != nil {
			t.Fatalf("the first notice: %v", err)
		}
		// The key's place is free again: the put-off notice goes out, as
		// its first attempt.
		if err := a.NotifyJob(ctx, NoticeInput{JobID: "capjob2-k0"}); err != nil {
			t.Fatalf("after the first: %v", err)
		}
		if evs := webhookEvents(t, s, "capjob2-k0"); len(evs) != 1 || evs[0].Message != "attempt 1: HTTP 200" {
			t.Fatalf("events %+v", evs)
		}
		mu.Lock()
		defer mu.Unlock()
		if seen["capjob1-k0"] != 1 || seen["capjob2-k0"] != 1 || seen["capjob1-k1"] != 1 {
			t.Fatalf("receiver saw %v", seen)
		}
		if len(a.noticesOf) != 0 {
			t.Fatalf("places still taken: %v", a.noticesOf)
		}
	})
}

// TestNotifyJobGivesUpAfterEightAttempts: against a receiver that always
// answers 503, each real attempt is a "webhook" event and a retryable
// NoticeFailed error whose NextRetryDelay is the backoff (2 s doubling to
// 2 min); attempts put off for the key's cap in between count for nothing;
// the 8th gives up (NoticeGaveUp, not retried), and a run after it sends
// nothing. Every attempt carries the same delivery id, in the header and
// in the signed body.
func TestNotifyJobGivesUpAfterEightAttempts(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		var mu sync.Mutex
		var headers, bodies []string
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			var p webhook.Payload
			_ = json.Unmarshal(body, &p)
			if !webhook.Verify("whsec_cap", r.Header.Get(webhook.SignatureHeader), body, time.Now(), time.Minute) {
				t.Errorf("bad signature on %s", body)
			}
			mu.Lock()
			headers, bodies = append(headers, r.Header.Get(webhook.DeliveryHeader)), append(bodies, p.DeliveryID)
			mu.Unlock()
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		defer recv.Close()
		a, keys := noticeFixture(t, s, 1, recv.URL+"/hook", 1, "deadjob")
		in := NoticeInput{JobID: "deadjob-k0"}
		want := []time.Duration{2, 4, 8, 16, 32, 64, 120}
		for n := 1; n <= NoticeAttempts; n++ {
			// A run put off for the key's cap before each attempt.
			release, _ := a.noticeTurn(keys[0])
			var ae *temporal.ApplicationError
			if err := a.NotifyJob(ctx, in); !errors.As(err, &ae) || ae.Type() != ErrNoticeKeyBusy {
				t.Fatalf("before attempt %d, key busy: %v", n, err)
			}
			release()
			err := a.NotifyJob(ctx, in)
			if !errors.As(err, &ae) {
				t.Fatalf("attempt %d: %v", n, err)
			}
			if n < NoticeAttempts {
				if ae.Type() != ErrNoticeFailed || ae.NonRetryable() || ae.NextRetryDelay() != want[n-1]*time.Second {
					t.Fatalf("attempt %d: %v (type %s, delay %v)", n, err, ae.Type(), ae.NextRetryDelay())
				}
			} else if ae.Type() != ErrNoticeGaveUp || !ae.NonRetryable() {
				t.Fatalf("last attempt: %v (type %s)", err, ae.Type())
			}
		}
		// Given up: a further run (the schedule's) sends nothing.
		var ae *temporal.ApplicationError
		if err := a.NotifyJob(ctx, in); !errors.As(err, &ae) || ae.Type() != ErrNoticeGaveUp || !ae.NonRetryable() {
			t.Fatalf("after giving up: %v", err)
		}
		evs := webhookEvents(t, s, in.JobID)
		if len(evs) != NoticeAttempts {
			t.Fatalf("%d events, want %d: %+v", len(evs), NoticeAttempts, evs)
		}
		for i, ev := range evs {
			if !ev.Failed || !strings.HasPrefix(ev.Message, fmt.Sprintf("attempt %d: ", i+1)) {
				t.Fatalf("event %d: %+v", i+1, ev)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		id := NoticeDeliveryID(in.JobID, "job.completed")
		if len(headers) != NoticeAttempts || !strings.HasPrefix(id, "dlv_") {
			t.Fatalf("%d requests, id %q", len(headers), id)
		}
		for i := range headers {
			if headers[i] != id || bodies[i] != id {
				t.Fatalf("attempt %d: header %q, body %q, want %q", i+1, headers[i], bodies[i], id)
			}
		}
		// Another notice has another id.
		if NoticeDeliveryID("deadjob-k1", "job.completed") == id || NoticeDeliveryID(in.JobID, "job.failed") == id {
			t.Fatal("delivery ids collide")
		}
	})
}
