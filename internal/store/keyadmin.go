package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// FindKey finds the key an operator names: a full key ("ak_…", looked up by
// its hash, active or not) or the 6-character suffix of an active key, as
// the web page and `kinflow key status` show it ("…3f9a1c"; the leading
// ellipsis may be given or not). ErrNotFound
// when nothing matches; an error naming the candidates when a suffix
// matches several active keys.
func (s *Store) FindKey(ctx context.Context, keyOrSuffix string) (*APIKey, error) {
	keyOrSuffix = strings.TrimLeft(strings.TrimSpace(keyOrSuffix), "….")
	if keyOrSuffix == "" {
		return nil, ErrNotFound
	}
	var ks []APIKey
	db := s.DB.WithContext(ctx)
	var err error
	if strings.HasPrefix(keyOrSuffix, "ak_") && len(keyOrSuffix) > 12 {
		err = db.Where("key_hash = ?", HashKey(keyOrSuffix)).Find(&ks).Error
	} else {
		err = db.Where("is_active AND key_suffix = ?", keyOrSuffix).Find(&ks).Error
	}
	if err != nil {
		return nil, fmt.Errorf("find API key: %w", err)
	}
	switch len(ks) {
	case 0:
		return nil, ErrNotFound
	case 1:
		return &ks[0], nil
	}
	var ids []string
	for _, k := range ks {
		ids = append(ids, fmt.Sprintf("key %d of %s", k.ID, k.IPAddress))
	}
	return nil, fmt.Errorf("%q matches %d active keys (%s): give the full key", keyOrSuffix, len(ks), strings.Join(ids, ", "))
}

// SetKeyLimit sets key id's daily prediction limit; nil restores the
// default (KINFLOW_DEFAULT_DAILY_QUOTA).
func (s *Store) SetKeyLimit(ctx context.Context, id int64, limit *int) error {
	if err := s.DB.WithContext(ctx).Model(&APIKey{}).Where("id = ?", id).Update("custom_daily_limit", limit).Error; err != nil {
		return fmt.Errorf("set limit of key %d: %w", id, err)
	}
	return nil
}

// SetUserBlocked blocks or unblocks the caller address ip (creating its
// row when missing). A blocked address's keys are refused and it cannot
// generate a new one.
func (s *Store) SetUserBlocked(ctx context.Context, ip string, blocked bool, now time.Time) error {
	now = now.UTC()
	err := s.DB.WithContext(ctx).Exec(`INSERT INTO api_users (ip_address, is_blocked, notes, first_seen, last_seen) VALUES (?, ?, '', ?, ?)
		ON CONFLICT (ip_address) DO UPDATE SET is_blocked = excluded.is_blocked`, ip, blocked, now, now).Error
	if err != nil {
		return fmt.Errorf("set blocked of %s: %w", ip, err)
	}
	return nil
}

// HashKey is how an API key is stored: the lowercase hex SHA-256 of the
// full key (the key itself is never kept).
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// SetKeyWeight sets key id's fairness weight (internal/fairness); nil
// restores the default. Jobs started after it use the new weight.
func (s *Store) SetKeyWeight(ctx context.Context, id int64, weight *float64) error {
	if err := s.DB.WithContext(ctx).Model(&APIKey{}).Where("id = ?", id).Update("fairness_weight", weight).Error; err != nil {
		return fmt.Errorf("set weight of key %d: %w", id, err)
	}
	return nil
}

// KeyWeight returns key id's fairness weight; nil: the default (or no
// such key).
func (s *Store) KeyWeight(ctx context.Context, id int64) (*float64, error) {
	var ws []struct{ FairnessWeight *float64 }
	if err := s.DB.WithContext(ctx).Model(&APIKey{}).Select("fairness_weight").Where("id = ?", id).Scan(&ws).Error; err != nil {
		return nil, fmt.Errorf("read weight of key %d: %w", id, err)
	}
	if len(ws) == 0 {
		return nil, nil
	}
	return ws[0].FairnessWeight, nil
}

// KeyWeights returns the fairness weights of keys ids that have one set
// (a key without one is absent: the default), in one read.
func (s *Store) KeyWeights(ctx context.Context, ids []int64) (map[int64]float64, error) {
	var rows []struct {
		ID             int64
		FairnessWeight *float64
	}
	if len(ids) > 0 {
		if err := s.DB.WithContext(ctx).Model(&APIKey{}).Select("id, fairness_weight").Where("id IN ?", ids).Scan(&rows).Error; err != nil {
			return nil, fmt.Errorf("read key weights: %w", err)
		}
	}
	out := make(map[int64]float64, len(rows))
	for _, r := range rows {
		if r.FairnessWeight != nil {
			out[r.ID] = *r.FairnessWeight
		}
	}
	return out, nil
}
