package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/webhook"
)

// EventWebhook is the JobEvent kind of a webhook delivery attempt.
const EventWebhook = "webhook"

// ErrNoticeRefused is the error type of a notice whose URL the operator does
// not allow: retrying cannot fix it.
const ErrNoticeRefused = "NoticeRefused"

// NoticeInput names the job whose end is announced.
type NoticeInput struct {
	JobID string `json:"job_id"`
}

// noticeClients are the HTTP clients of notices, [allowPrivate].
var (
	noticeClientsOnce sync.Once
	noticeClients     [2]*http.Client
)

func noticeClient(allowPrivate bool) *http.Client {
	noticeClientsOnce.Do(func() {
		noticeClients[0], noticeClients[1] = webhook.Client(false), webhook.Client(true)
	})
	if allowPrivate {
		return noticeClients[1]
	}
	return noticeClients[0]
}

// HasNotice reports whether a job has a notify URL (a local activity: a job
// without one costs no task-queue round trip).
func (a *Activities) HasNotice(ctx context.Context, in NoticeInput) (bool, error) {
	if a.Store == nil {
		return false, nil
	}
	return a.Store.HasNotifyURL(ctx, in.JobID)
}

// Notice delivery: the activity owns its schedule (docs/api.md, Webhooks).
const (
	// NoticeAttempts is how many times a notice is sent before it is given
	// up: attempts put off because its key was busy do not count.
	NoticeAttempts = 8
	// NoticeBusyDelay is the shortest wait before a notice put off for its
	// key's cap is tried again (up to twice that, jittered so that a key's
	// waiting notices do not come back together).
	NoticeBusyDelay = 2 * time.Second
	// noticeFirstBackoff doubles after each failed attempt up to
	// noticeMaxBackoff: 2 s, 4 s, … 2 min, as the retry policy did before
	// the activity owned the schedule.
	noticeFirstBackoff = 2 * time.Second
	noticeMaxBackoff   = 2 * time.Minute
)

// The attempts are counted from the job's "webhook" events, of which
// AddEvent keeps the last keepEvents: the count is exact only if those
// cover every attempt (this fails to compile otherwise).
const _ = uint(keepEvents - NoticeAttempts)

// Error types of NotifyJob beside ErrNoticeRefused.
const (
	// ErrNoticeKeyBusy: the job's key had KINFLOW_NOTICE_PER_KEY notices
	// in flight on this worker; retried after NextRetryDelay, nothing sent.
	ErrNoticeKeyBusy = "NoticeKeyBusy"
	// ErrNoticeFailed: an attempt got no 2xx answer; retried after
	// NextRetryDelay (the backoff).
	ErrNoticeFailed = "NoticeFailed"
	// ErrNoticeGaveUp: NoticeAttempts attempts failed; not retried.
	ErrNoticeGaveUp = "NoticeGaveUp"
)

// noticeBackoff is the wait after failed attempt n (1-based).
func noticeBackoff(n int) time.Duration {
	d := noticeFirstBackoff
	for i := 1; i < n && d < noticeMaxBackoff; i++ {
		d *= 2
	}
	return min(d, noticeMaxBackoff)
}

// noticeBusyDelay is the jittered wait of a notice put off for its key.
func noticeBusyDelay() time.Duration {
	return NoticeBusyDelay + rand.N(NoticeBusyDelay)
}

// NoticeDeliveryID is the delivery id of the notice of job jobID's end (its
// type, job.completed or job.failed). A job ends once, and every sending of
// that end (a retried attempt, an attempt whose answer was lost, a reset or
// replayed workflow) is the same notice: it is derived from the job and the
// type alone, so a receiver that keeps the ids it has seen takes it once.
func NoticeDeliveryID(jobID, typ string) string {
	h := sha256.Sum256([]byte("kinflow-notice\x00" + typ + "\x00" + jobID))
	return "dlv_" + hex.EncodeToString(h[:16])
}

// noticeTurn takes a place among the notices of key in flight on this
// worker (at most KINFLOW_NOTICE_PER_KEY; 0 in a Config not loaded from
// the key table: no cap) and returns the function that gives it back; ok
// is false, and nothing is taken, when the key is at its cap.
func (a *Activities) noticeTurn(key int64) (release func(), ok bool) {
	limit := 0
	if a.Config != nil {
		limit = a.Config.NoticePerKey
	}
	if limit <= 0 {
		return func() {}, true
	}
	a.noticeMu.Lock()
	defer a.noticeMu.Unlock()
	if a.noticesOf[key] >= limit {
		return nil, false
	}
	if a.noticesOf == nil {
		a.noticesOf = map[int64]int{}
	}
	a.noticesOf[key]++
	return func() {
		a.noticeMu.Lock()
		defer a.noticeMu.Unlock()
		if a.noticesOf[key]--; a.noticesOf[key] <= 0 {
			delete(a.noticesOf, key)
		}
	}, true
}

// NotifyJob POSTs a finished job's notice to its notify URL, signed with its
// key's secret (webhook.Sign), with its delivery id (NoticeDeliveryID).
//
// It runs on the notices' own task queue and owns its retry schedule: a
// notice whose key already has KINFLOW_NOTICE_PER_KEY notices in flight on
// this worker returns at once an ErrNoticeKeyBusy error to be retried a few
// seconds later (waiting would hold a slot), records nothing and sends
// nothing. Every real attempt is recorded as a "webhook" job event, and
// those events count the attempts: an answer other than 2xx, or none, is an
// ErrNoticeFailed error retried after the backoff (2 s doubling to 2 min),
// until the NoticeAttempts-th, which gives up (ErrNoticeGaveUp, not
// retried). A refused address is not retried either. The workflow's
// schedule-to-close timeout bounds it all.
func (a *Activities) NotifyJob(ctx context.Context, in NoticeInput) error {
	j, secret, err := a.Store.JobNotice(ctx, in.JobID)
	if err != nil {
		return err
	}
	if j.NotifyURL == "" || (j.Status != store.JobCompleted && j.Status != store.JobFailed) {
		return nil
	}
	release, ok := a.noticeTurn(j.KeyID)
	if !ok {
		return temporal.NewApplicationErrorWithOptions(
			fmt.Sprintf("the key's notices are at KINFLOW_NOTICE_PER_KEY (%d) on this worker: put off", a.Config.NoticePerKey),
			// Benign: expected, so the SDK logs it at debug level and
			// counts no failure (a key's many notices put off every few
			// seconds would fill the log with errors).
			ErrNoticeKeyBusy, temporal.ApplicationErrorOptions{NextRetryDelay: noticeBusyDelay(), Category: temporal.ApplicationErrorCategoryBenign})
	}
	defer release()
	sent, delivered, err := a.Store.EventCounts(ctx, j.ID, EventWebhook)
	if err != nil {
		return err
	}
	if delivered > 0 {
		// An attempt delivered it and its answer to Temporal was lost.
		return nil
	}
	if sent >= NoticeAttempts {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("notice not delivered in %d attempts", sent), ErrNoticeGaveUp, nil)
	}
	attempt := sent + 1
	p := webhook.Payload{Type: "job.completed", JobID: j.ID, Status: j.Status,
		StatusURL: "/api/v1/status/" + j.ID + "/", Synthetic: j.Synthetic,
		Charge: &webhook.Charge{RowsCharged: j.RequestedRows, RowsRefunded: j.RefundedRows, CachedRowsRefunded: j.RefundedCachedRows}}
	if j.CompletedAt != nil {
		p.CompletedAt = j.CompletedAt.UTC().Format(time.RFC3339)
	}
	if j.Status == store.JobCompleted {
		p.ResultURL = "/api/v1/result/" + j.ID + "/"
	} else {
		p.Type = "job.failed"
	}
	p.DeliveryID = NoticeDeliveryID(j.ID, p.Type)
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	allow := a.Config != nil && a.Config.WebhookAllowPrivate
	if err := webhook.CheckURL(j.NotifyURL, allow); err != nil {
		a.noticeEvent(ctx, j.ID, attempt, 0, err)
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrNoticeRefused, nil)
	}
	code, err := webhook.Send(ctx, noticeClient(allow), j.NotifyURL, secret, p.DeliveryID, body, time.Now())
	a.noticeEvent(ctx, j.ID, attempt, code, err)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, webhook.ErrRefused):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrNoticeRefused, nil)
	case attempt >= NoticeAttempts:
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("notice not delivered in %d attempts, the last: %v", attempt, err), ErrNoticeGaveUp, err)
	}
	return temporal.NewApplicationErrorWithOptions(err.Error(), ErrNoticeFailed,
		temporal.ApplicationErrorOptions{NextRetryDelay: noticeBackoff(attempt), Cause: err})
}

// noticeEvent records one delivery attempt as a job event (its failure
// shows there and in the Temporal UI, never in the job's status).
func (a *Activities) noticeEvent(ctx context.Context, jobID string, attempt int, code int, err error) {
	// No event key: each attempt runs once, and each is worth its row.
	ev := &store.JobEvent{JobID: jobID, Kind: EventWebhook, Completed: err == nil, Failed: err != nil,
		Attempted: true, CreatedAt: time.Now().UTC()}
	if err != nil {
		ev.Reason, ev.Message = "webhook_failed", fmt.Sprintf("attempt %d: %v", attempt, err)
	} else {
		ev.Reason, ev.Message = "webhook_delivered", fmt.Sprintf("attempt %d: HTTP %d", attempt, code)
	}
	if _, e := a.Store.AddEvent(ctx, ev, keepEvents); e != nil {
		a.Log.Warn("webhook event", "job_id", jobID, "error", e)
	}
	a.Log.Info("webhook", "job_id", jobID, "attempt", attempt, "status", code, "error", err)
}
