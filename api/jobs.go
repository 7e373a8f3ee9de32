package api

import (
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kinflow/kinflow/internal/wire"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/store"
)

// Page sizes of GET /jobs/: a default that fits a screen, a maximum that
// keeps one response small (a client pages on with nextCursor).
const (
	jobsPageDefault = 20
	jobsPageMax     = 100
)

var wireStatuses = []string{store.JobPending, store.JobProcessing, store.JobCompleted, store.JobFailed}

// jobsList answers GET /jobs/: the caller's jobs, newest first, a page at a
// time (?limit=, ?cursor=), optionally only those in ?status= (one or more
// of Pending, Processing, Completed, Failed, comma-separated). A key sees
// only its own jobs.
func (s *Server) jobsList(c *gin.Context) {
	limit := jobsPageDefault
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > jobsPageMax {
			abortError(c, http.StatusBadRequest, "Invalid limit: give a whole number from 1 to "+strconv.Itoa(jobsPageMax)+".")
			return
		}
		limit = n
	}
	var statuses []string
	if v := c.Query("status"); v != "" {
		for _, st := range strings.Split(v, ",") {
			st = strings.TrimSpace(st)
			i := slices.IndexFunc(wireStatuses, func(w string) bool { return strings.EqualFold(w, st) })
			if i < 0 {
				abortError(c, http.StatusBadRequest, "Invalid status '"+st+"': use Pending, Processing, Completed or Failed (comma-separated for several).")
				return
			}
			statuses = append(statuses, wireStatuses[i])
			if wireStatuses[i] == store.JobPending {
				// Submitting reads as Pending on the wire.
				statuses = append(statuses, store.JobSubmitting)
			}
		}
	}
	var after *store.JobCursor
	if v := c.Query("cursor"); v != "" {
		cur, ok := decodeJobCursor(v)
		if !ok {
			abortError(c, http.StatusBadRequest, "Invalid cursor: pass the nextCursor of the previous page unchanged.")
			return
		}
		after = cur
	}
	// One more than the page tells whether there is a next page.
	js, err := s.deps.Store.JobsOf(c.Request.Context(), authKey(c).ID, statuses, after, limit+1)
	if err != nil {
		s.internalError(c, "jobs.list_failed", err)
		return
	}
	out := wire.JobsPage{Jobs: make([]wire.Job, 0, min(len(js), limit))}
	if len(js) > limit {
		js = js[:limit]
		last := js[len(js)-1]
		cur := encodeJobCursor(last.SubmittedAt, last.ID)
		out.NextCursor = &cur
	}
	for _, j := range js {
		it := wire.Job{JobID: j.ID, Status: jobStatusOnWire(j.Status), Rows: j.RequestedRows, InputName: j.InputName,
			SubmittedAt: isoformat(j.SubmittedAt), StartedAt: isoPtr(j.StartedAt), CompletedAt: isoPtr(j.CompletedAt),
			StatusURL: "/api/v1/status/" + j.ID + "/", Synthetic: j.Synthetic}
		it.Targets, it.Methods = j.Targets, j.Methods
		if it.Targets == nil {
			it.Targets = []string{}
		}
		if it.Methods == nil {
			it.Methods = map[string]string{}
		}
		it.Expired = s.jobExpired(&j)
		if j.Status == store.JobCompleted && !it.Expired {
			it.ResultURL = "/api/v1/result/" + j.ID + "/"
		}
		out.Jobs = append(out.Jobs, it)
	}
	c.JSON(http.StatusOK, out)
}

// encodeJobCursor makes an opaque cursor of a job's place in the list.
func encodeJobCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UTC().UnixNano(), 10) + "." + id))
}

func decodeJobCursor(v string) (*store.JobCursor, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return nil, false
	}
	ns, id, ok := strings.Cut(string(raw), ".")
	if !ok || !jobIDPattern.MatchString(id) {
		return nil, false
	}
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return nil, false
	}
	return &store.JobCursor{SubmittedAt: time.Unix(0, n).UTC(), ID: id}, true
}
