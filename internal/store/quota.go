package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// QuotaDay is the quota day (YYYY-MM-DD, UTC) that t falls on.
func QuotaDay(t time.Time) string { return t.UTC().Format("2006-01-02") }

// SecondsToReset is the whole seconds from t to the next 00:00 UTC, truncated.
func SecondsToReset(t time.Time) int {
	t = t.UTC()
	next := time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
	return int(next.Sub(t) / time.Second)
}

// QuotaUsed is key's consumption on day (0 when it has no row).
func (s *Store) QuotaUsed(ctx context.Context, keyID int64, day string) (int64, error) {
	var q QuotaUsage
	err := s.DB.WithContext(ctx).Select("used").Where("key_id = ? AND day = ?", keyID, day).Take(&q).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read quota of key %d on %s: %w", keyID, day, err)
	}
	return q.Used, nil
}

// ReserveQuota adds n to key's counter on day if the result stays within
// limit, and reports whether it did. It is one conditional UPDATE, so any
// number of concurrent reservations never admit more than limit in total.
// used is the counter after the reservation when ok, else its current value.
//
// The UPDATE locks the key's row of the day until the caller's transaction
// ends, so every submit of one key waits here for the one before it: a
// caller does its other writes first and reserves last (ChargeAndCreateJob),
// and the common case is that one statement (RETURNING the counter); the
// row is created, at 0, only when the first UPDATE finds none. A pipeline
// submitting 200 jobs at once with one key waited 62–68 ms per statement
// on Postgres when the row was created first and the job written after
// (docs/BENCHMARKS.md, "One key's submits waited on each other in Postgres").
func (s *Store) ReserveQuota(ctx context.Context, keyID int64, day string, n, limit int64) (ok bool, used int64, err error) {
	db := s.DB.WithContext(ctx)
	if ok, used, err = addQuota(db, keyID, day, n, limit); err != nil || ok {
		return ok, used, err
	}
	// No row for the day yet, or over the limit. A concurrent creator wins
	// the conflict harmlessly.
	if err := db.Exec("INSERT INTO quota_usage (key_id, day, used) VALUES (?, ?, 0) ON CONFLICT (key_id, day) DO NOTHING", keyID, day).Error; err != nil {
		return false, 0, fmt.Errorf("create quota row of key %d on %s: %w", keyID, day, err)
	}
	if ok, used, err = addQuota(db, keyID, day, n, limit); err != nil || ok {
		return ok, used, err
	}
	used, err = s.QuotaUsed(ctx, keyID, day)
	return false, used, err
}

// addQuota is ReserveQuota's conditional UPDATE: ok with the counter after
// it, or not ok (no row, or over limit).
func addQuota(db *gorm.DB, keyID int64, day string, n, limit int64) (bool, int64, error) {
	var after []int64
	err := db.Raw("UPDATE quota_usage SET used = used + ? WHERE key_id = ? AND day = ? AND used + ? <= ? RETURNING used", n, keyID, day, n, limit).Scan(&after).Error
	if err != nil {
		return false, 0, fmt.Errorf("reserve %d predictions for key %d on %s: %w", n, keyID, day, err)
	}
	if len(after) == 1 {
		return true, after[0], nil
	}
	return false, 0, nil
}

// RefundQuota gives n predictions back to key's counter on day:
// used = max(0, used - n). A missing row is left missing (a refund after the
// UTC day changed is lost, as the contract says). The worker calls it for rows
// that got no prediction; the API calls it when a job could not be queued.
func (s *Store) RefundQuota(ctx context.Context, keyID int64, day string, n int64) error {
	if n <= 0 {
		return nil
	}
	err := s.DB.WithContext(ctx).Exec(
		"UPDATE quota_usage SET used = CASE WHEN used > ? THEN used - ? ELSE 0 END WHERE key_id = ? AND day = ?",
		n, n, keyID, day).Error
	if err != nil {
		return fmt.Errorf("refund %d predictions to key %d on %s: %w", n, keyID, day, err)
	}
	return nil
}
