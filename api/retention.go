package api

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/store"
)

// Retention: a finished job's folder — input, intermediate
// files, result — is kept for KINFLOW_JOB_RETENTION_DAYS after the job
// ended, then removed by the api process (RunRetention). From then on the
// result route answers 410 Gone and the jobs list marks the job expired.
// The job's row stays: its status, message and charge remain visible.

// DefaultJobRetention is KINFLOW_JOB_RETENTION_DAYS's default.
const DefaultJobRetention = 30 * 24 * time.Hour

const (
	// retentionEvery is the pause between two retention passes: expiry
	// is a matter of days, a minute late is nothing.
	retentionEvery = time.Minute
	// retentionBatch is the most folders one pass removes.
	retentionBatch = 200
)

func (s *Server) jobRetention() time.Duration {
	if s.deps.Config != nil && s.deps.Config.JobRetention > 0 {
		return s.deps.Config.JobRetention
	}
	return DefaultJobRetention
}

// jobExpired reports whether j's folder is gone, or due to go.
func (s *Server) jobExpired(j *store.Job) bool {
	if j.ExpiredAt != nil {
		return true
	}
	finished := j.Status == store.JobCompleted || j.Status == store.JobFailed
	return finished && j.CompletedAt != nil && s.now().Sub(*j.CompletedAt) >= s.jobRetention()
}

// refuseExpired answers 410 for an expired job's result.
func (s *Server) refuseExpired(c *gin.Context, j *store.Job) {
	days := int(s.jobRetention() / (24 * time.Hour))
	abortError(c, http.StatusGone, fmt.Sprintf(
		"Job '%s' has expired: its files and result are kept for %d days after the job ends, and have been removed. Submit the input again to compute it anew.", j.ID, days))
}

// ExpireJobs removes the folders of up to batch jobs that ended more than
// KINFLOW_JOB_RETENTION_DAYS ago, and returns how many.
func (s *Server) ExpireJobs(ctx context.Context, batch int) (int, error) {
	// Removing a folder of a media root that is away removes nothing:
	// the jobs would be marked expired with their files still there.
	if err := s.mediaAway(true); err != nil {
		return 0, err
	}
	now := s.now()
	jobs, err := s.deps.Store.ExpiringJobs(ctx, now.Add(-s.jobRetention()), batch)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, j := range jobs {
		if err := os.RemoveAll(s.mediaPath(jobfiles.DirRel(j.ID))); err != nil {
			s.log.Warn("job.expire_failed", "job_id", j.ID, "error", err)
			continue
		}
		if err := s.deps.Store.MarkExpired(ctx, j.ID, now); err != nil {
			return n, err
		}
		n++
	}
	if n > 0 {
		s.log.Info("job.expired", "jobs", n)
	}
	return n, nil
}

// RunRetention runs ExpireJobs every retentionEvery until ctx ends (started
// by RunSubmitReconciler, so that every api process runs it; two running it
// at once remove the same folder harmlessly).
func (s *Server) RunRetention(ctx context.Context) {
	t := time.NewTicker(retentionEvery)
	defer t.Stop()
	for {
		for {
			n, err := s.ExpireJobs(ctx, retentionBatch)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("job.retention_failed", "error", err)
			}
			if err != nil || n < retentionBatch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
