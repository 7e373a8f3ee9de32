package store

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// ArtefactClaim is a running job stage's claim on an ephemeral artefact.
type ArtefactClaim struct {
	Path       string `gorm:"primaryKey"`
	JobID      string `gorm:"primaryKey;size:40"`
	StageIndex int    `gorm:"primaryKey;autoIncrement:false"`
	CreatedAt  time.Time
}

// TableName implements gorm's Tabler.
func (ArtefactClaim) TableName() string { return "artefact_claims" }

// claimsLockID serialises claiming and releasing on Postgres (SQLite's
// immediate transactions already run one writer at a time): a release that
// decides a file is unclaimed and a claim on the same file can never
// interleave.
const claimsLockID int64 = 0x6b666c636c61696d

func (s *Store) claimsTx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if s.Dialect == Postgres {
			if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", claimsLockID).Error; err != nil {
				return err
			}
		}
		return fn(tx)
	})
}

// ClaimArtefacts records that job stage (jobID, stage) needs paths until its
// Cleanup. Claiming twice is harmless.
func (s *Store) ClaimArtefacts(ctx context.Context, jobID string, stage int, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	now := time.Now().UTC()
	rows := make([]ArtefactClaim, len(paths))
	for i, p := range paths {
		rows[i] = ArtefactClaim{Path: p, JobID: jobID, StageIndex: stage, CreatedAt: now}
	}
	err := s.claimsTx(ctx, func(tx *gorm.DB) error {
		return tx.Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(rows, 500).Error
	})
	if err != nil {
		return fmt.Errorf("claim artefacts for job %s: %w", jobID, err)
	}
	return nil
}

// ReleaseArtefacts drops the stage's claims and calls remove, inside the same
// serialised transaction, for each of its paths that no other job claims.
//
// A stage that claimed nothing (most: only a few methods have ephemeral
// artefacts) is answered by one read, without the transaction and its
// database-wide lock: its claims are made by its own plan, which has ended
// before its cleanup, so none can appear meanwhile. Every small job's
// cleanup took that lock, one after another across the cluster.
func (s *Store) ReleaseArtefacts(ctx context.Context, jobID string, stage int, remove func(path string) error) (int, error) {
	var one []string
	if err := s.DB.WithContext(ctx).Model(&ArtefactClaim{}).Where("job_id = ? AND stage_index = ?", jobID, stage).Limit(1).Pluck("path", &one).Error; err != nil {
		return 0, fmt.Errorf("release artefacts of job %s: %w", jobID, err)
	}
	if len(one) == 0 {
		return 0, nil
	}
	removed := 0
	err := s.claimsTx(ctx, func(tx *gorm.DB) error {
		var mine []string
		if err := tx.Model(&ArtefactClaim{}).Where("job_id = ? AND stage_index = ?", jobID, stage).Pluck("path", &mine).Error; err != nil {
			return err
		}
		if err := tx.Where("job_id = ? AND stage_index = ?", jobID, stage).Delete(&ArtefactClaim{}).Error; err != nil {
			return err
		}
		for start := 0; start < len(mine); start += 500 {
			chunk := mine[start:min(start+500, len(mine))]
			var still []string
			if err := tx.Model(&ArtefactClaim{}).Where("path IN ?", chunk).Distinct().Pluck("path", &still).Error; err != nil {
				return err
			}
			held := make(map[string]bool, len(still))
			for _, p := range still {
				held[p] = true
			}
			for _, p := range chunk {
				if held[p] {
					continue
				}
				if err := remove(p); err != nil {
					return err
				}
				removed++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("release artefacts of job %s: %w", jobID, err)
	}
	return removed, nil
}
