package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
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

// NoticeDeliveryID is the delivery id of the notice of job jobID's end (its
// type, job.completed or job.failed). A job ends once, and every sending of
// that end (a retried attempt, an attempt whose answer was lost, a reset or
// replayed workflow) is the same notice: it is derived from the job and the
// type alone, so a receiver that keeps the ids it has seen takes it once.
func NoticeDeliveryID(jobID, typ string) string {
	h := sha256.Sum256([]byte("kinflow-notice\x00" + typ + "\x00" + jobID))
	return "dlv_" + hex.EncodeToString(h[:16])
}

// NotifyJob POSTs a finished job's notice to its notify URL, signed with its
// key's secret (webhook.Sign), with its delivery id (NoticeDeliveryID). Each attempt is recorded as a "webhook" job
// event; an answer other than 2xx or no answer is an error that Temporal
// retries with backoff; a refused address is not retried.
func (a *Activities) NotifyJob(ctx context.Context, in NoticeInput) error {
	j, secret, err := a.Store.JobNotice(ctx, in.JobID)
	if err != nil {
		return err
	}
	if j.NotifyURL == "" || (j.Status != store.JobCompleted && j.Status != store.JobFailed) {
		return nil
	}
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
	attempt := int32(1)
	if activity.IsActivity(ctx) {
		attempt = activity.GetInfo(ctx).Attempt
	}
	if err := webhook.CheckURL(j.NotifyURL, allow); err != nil {
		a.noticeEvent(ctx, j.ID, attempt, 0, err)
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrNoticeRefused, nil)
	}
	code, err := webhook.Send(ctx, noticeClient(allow), j.NotifyURL, secret, p.DeliveryID, body, time.Now())
	a.noticeEvent(ctx, j.ID, attempt, code, err)
	if errors.Is(err, webhook.ErrRefused) {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrNoticeRefused, nil)
	}
	return err
}

// noticeEvent records one delivery attempt as a job event (its failure
// shows there and in the Temporal UI, never in the job's status).
func (a *Activities) noticeEvent(ctx context.Context, jobID string, attempt int32, code int, err error) {
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
