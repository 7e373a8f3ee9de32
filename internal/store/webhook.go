package store

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"
)

// KeyWebhook returns key keyID's default notify URL and its webhook signing
// secret, storing newSecret first when the key has none yet (a concurrent
// caller's secret wins; both read the stored one).
func (s *Store) KeyWebhook(ctx context.Context, keyID int64, newSecret string) (url, secret string, err error) {
	db := s.DB.WithContext(ctx)
	if newSecret != "" {
		if err := db.Exec("UPDATE api_keys SET webhook_secret = ? WHERE id = ? AND webhook_secret = ''", newSecret, keyID).Error; err != nil {
			return "", "", fmt.Errorf("make webhook secret of key %d: %w", keyID, err)
		}
	}
	var k APIKey
	err = db.Select("notify_url", "webhook_secret").Where("id = ?", keyID).Take(&k).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return "", "", ErrNotFound
	}
	if err != nil {
		return "", "", fmt.Errorf("read webhook of key %d: %w", keyID, err)
	}
	return k.NotifyURL, k.WebhookSecret, nil
}

// SetKeyNotifyURL sets key keyID's default notify URL ("" clears it).
func (s *Store) SetKeyNotifyURL(ctx context.Context, keyID int64, url string) error {
	if err := s.DB.WithContext(ctx).Exec("UPDATE api_keys SET notify_url = ? WHERE id = ?", url, keyID).Error; err != nil {
		return fmt.Errorf("set notify URL of key %d: %w", keyID, err)
	}
	return nil
}

// RotateWebhookSecret replaces key keyID's webhook signing secret.
func (s *Store) RotateWebhookSecret(ctx context.Context, keyID int64, secret string) error {
	if err := s.DB.WithContext(ctx).Exec("UPDATE api_keys SET webhook_secret = ? WHERE id = ?", secret, keyID).Error; err != nil {
		return fmt.Errorf("rotate webhook secret of key %d: %w", keyID, err)
	}
	return nil
}

// JobNotice returns job jobID and the webhook signing secret of its key.
func (s *Store) JobNotice(ctx context.Context, jobID string) (*Job, string, error) {
	j, err := s.Job(ctx, jobID)
	if err != nil {
		return nil, "", err
	}
	var k APIKey
	if err := s.DB.WithContext(ctx).Select("webhook_secret").Where("id = ?", j.KeyID).Take(&k).Error; err != nil {
		return nil, "", fmt.Errorf("read webhook secret of job %s: %w", jobID, err)
	}
	return j, k.WebhookSecret, nil
}

// HasNotifyURL reports whether job jobID has a notify URL: one small read,
// so that jobs without a webhook cost no activity.
func (s *Store) HasNotifyURL(ctx context.Context, jobID string) (bool, error) {
	var n int64
	if err := s.DB.WithContext(ctx).Model(&Job{}).Where("id = ? AND notify_url <> ''", jobID).Count(&n).Error; err != nil {
		return false, fmt.Errorf("read notify URL of job %s: %w", jobID, err)
	}
	return n > 0, nil
}

// EventCounts counts job jobID's events of kind: all of them, and those
// Completed. AddEvent keeps the last `keep` of a kind, so the count is
// exact while a job has at most that many.
func (s *Store) EventCounts(ctx context.Context, jobID, kind string) (total, completed int, err error) {
	var row struct {
		Total     int
		Completed int
	}
	err = s.DB.WithContext(ctx).Model(&JobEvent{}).
		Select("COUNT(*) AS total, COUNT(CASE WHEN completed THEN 1 END) AS completed").
		Where("job_id = ? AND kind = ?", jobID, kind).Scan(&row).Error
	if err != nil {
		return 0, 0, fmt.Errorf("count %s events of job %s: %w", kind, jobID, err)
	}
	return row.Total, row.Completed, nil
}
