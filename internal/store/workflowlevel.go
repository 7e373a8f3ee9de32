package store

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"
)

// WorkflowTooNewError is a worker's refusal to run workflows older than
// ones that a newer worker may have begun on this deployment.
type WorkflowTooNewError struct {
	Recorded, Mine int
}

func (e *WorkflowTooNewError) Error() string {
	return fmt.Sprintf("jobs begun by a newer kinflow (workflow level %d) may still be running, and this kinflow's workflows (level %d) cannot go on with them: run the newer release, or once no job is unfinished run `kinflow migrate --accept-older-workflows`", e.Recorded, e.Mine)
}

// ClaimWorkflowLevel records that workflow code of level runs here, or
// refuses with a *WorkflowTooNewError when a higher level is recorded.
func (s *Store) ClaimWorkflowLevel(ctx context.Context, level int) error {
	return s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&SchemaCompat{}).Where("id = 1 AND workflow_level < ?", level).Update("workflow_level", level).Error; err != nil {
			return fmt.Errorf("record the workflow level: %w", err)
		}
		var c SchemaCompat
		if err := tx.Where("id = 1").Take(&c).Error; err != nil {
			return fmt.Errorf("read the workflow level: %w", err)
		}
		if c.WorkflowLevel > level {
			return &WorkflowTooNewError{Recorded: c.WorkflowLevel, Mine: level}
		}
		return nil
	})
}

// ErrJobsUnfinished refuses to lower the workflow level while jobs run.
var ErrJobsUnfinished = errors.New("jobs are unfinished")

// AcceptOlderWorkflows lowers the recorded workflow level to level when no
// job is unfinished (Submitting, Pending or Processing): with nothing
// running, older workflow code has nothing it cannot replay. It returns the
// level that was recorded.
func (s *Store) AcceptOlderWorkflows(ctx context.Context, level int) (int, error) {
	var was int
	err := s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var n int64
		if err := tx.Model(&Job{}).Where("status IN ?", []string{JobSubmitting, JobPending, JobProcessing}).Count(&n).Error; err != nil {
			return fmt.Errorf("count unfinished jobs: %w", err)
		}
		if n > 0 {
			return fmt.Errorf("%d %w: wait until they end", n, ErrJobsUnfinished)
		}
		var c SchemaCompat
		if err := tx.Where("id = 1").Take(&c).Error; err != nil {
			return fmt.Errorf("read the workflow level: %w", err)
		}
		was = c.WorkflowLevel
		return tx.Model(&SchemaCompat{}).Where("id = 1").Update("workflow_level", level).Error
	})
	return was, err
}
