package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
)

// SelfServiceLabel is the label of keys made through /api/api-key/generate/.
const SelfServiceLabel = "Self-service (web)"

// AuthKey is what request authentication needs of one active key, read in a
// single query.
type AuthKey struct {
	ID               int64
	IPAddress        string
	KeyHash          string
	CustomDailyLimit *int
	LastUsedAt       *time.Time
	IsBlocked        bool
	// UsedToday is the key's quota consumption on the day asked for.
	UsedToday int64
	// NotifyURL is the key's default webhook URL.
	NotifyURL string
}

// ActiveKeyByHash finds the active key whose SHA-256 hex is hash, with its
// owner's blocked flag and its quota used on day; ErrNotFound when none. It
// is one query because every authenticated request runs it.
func (s *Store) ActiveKeyByHash(ctx context.Context, hash, day string) (*AuthKey, error) {
	var k AuthKey
	res := s.DB.WithContext(ctx).Raw(`SELECT k.id, k.ip_address, k.key_hash, k.custom_daily_limit, k.last_used_at,
		COALESCE(u.is_blocked, FALSE) AS is_blocked, COALESCE(q.used, 0) AS used_today, k.notify_url
		FROM api_keys k LEFT JOIN api_users u ON u.ip_address = k.ip_address
		LEFT JOIN quota_usage q ON q.key_id = k.id AND q.day = ?
		WHERE k.key_hash = ? AND k.is_active`, day, hash).Scan(&k)
	if res.Error != nil {
		return nil, fmt.Errorf("look up API key: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return nil, ErrNotFound
	}
	return &k, nil
}

// UsableKeyHashes answers which of hashes belong to an active key whose
// owner is not blocked (the set of those), in one query per 500 hashes: the
// API checks the keys of its open event streams and long polls with it.
func (s *Store) UsableKeyHashes(ctx context.Context, hashes []string) (map[string]bool, error) {
	out := make(map[string]bool, len(hashes))
	const chunk = 500
	for from := 0; from < len(hashes); from += chunk {
		var got []string
		err := s.Unprepared(ctx).Raw(`SELECT k.key_hash FROM api_keys k
			LEFT JOIN api_users u ON u.ip_address = k.ip_address
			WHERE k.key_hash IN ? AND k.is_active AND NOT COALESCE(u.is_blocked, FALSE)`,
			hashes[from:min(from+chunk, len(hashes))]).Scan(&got).Error
		if err != nil {
			return nil, fmt.Errorf("check API keys: %w", err)
		}
		for _, h := range got {
			out[h] = true
		}
	}
	return out, nil
}

// TouchKeyUsed sets key's last_used_at to now unless it is already at or after
// notBefore, so that a busy key costs one write per interval, not per request.
func (s *Store) TouchKeyUsed(ctx context.Context, keyID int64, now, notBefore time.Time) error {
	err := s.DB.WithContext(ctx).Exec(
		"UPDATE api_keys SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)",
		now.UTC(), keyID, notBefore.UTC()).Error
	if err != nil {
		return fmt.Errorf("touch API key %d: %w", keyID, err)
	}
	return nil
}

// ActiveKeyForIP is the active key of ip; ErrNotFound when it has none.
func (s *Store) ActiveKeyForIP(ctx context.Context, ip string) (*APIKey, error) {
	var k APIKey
	err := s.DB.WithContext(ctx).Where("ip_address = ? AND is_active", ip).Take(&k).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("look up the active key of %s: %w", ip, err)
	}
	return &k, nil
}

// TouchUser creates the API user of ip when missing and sets its last_seen,
// returning whether it is blocked.
func (s *Store) TouchUser(ctx context.Context, ip string, now time.Time) (blocked bool, err error) {
	db := s.DB.WithContext(ctx)
	now = now.UTC()
	if err := db.Exec(`INSERT INTO api_users (ip_address, is_blocked, notes, first_seen, last_seen) VALUES (?, FALSE, '', ?, ?)
		ON CONFLICT (ip_address) DO UPDATE SET last_seen = excluded.last_seen`, ip, now, now).Error; err != nil {
		return false, fmt.Errorf("record API user %s: %w", ip, err)
	}
	var u APIUser
	if err := db.Select("is_blocked").Where("ip_address = ?", ip).Take(&u).Error; err != nil {
		return false, fmt.Errorf("read API user %s: %w", ip, err)
	}
	return u.IsBlocked, nil
}

// ActivateKey makes hash/suffix the active key of ip. It reuses ip's most
// recent revoked key row when there is one, so the key id (which owns the
// quota counter and the jobs) survives revoke-and-generate: revoking cannot be
// used to reset the daily quota. ErrConflict when ip already has an active key
// (the partial unique index decides, so concurrent calls cannot both win).
func (s *Store) ActivateKey(ctx context.Context, ip, hash, suffix string, now time.Time) (int64, error) {
	db := s.DB.WithContext(ctx)
	now = now.UTC()
	if _, err := s.ActiveKeyForIP(ctx, ip); err == nil {
		return 0, ErrConflict
	} else if !errors.Is(err, ErrNotFound) {
		return 0, err
	}
	var old APIKey
	err := db.Where("ip_address = ? AND NOT is_active", ip).Order("id DESC").Take(&old).Error
	switch {
	case err == nil:
		res := db.Exec(`UPDATE api_keys SET key_hash = ?, key_suffix = ?, is_active = TRUE, label = ?, created_at = ?,
			last_used_at = NULL, revoked_at = NULL WHERE id = ? AND NOT is_active`, hash, suffix, SelfServiceLabel, now, old.ID)
		if res.Error != nil {
			return 0, keyWriteError(ip, res.Error)
		}
		if res.RowsAffected == 0 {
			// A concurrent generate re-activated the same row first.
			return 0, ErrConflict
		}
		return old.ID, nil
	case errors.Is(err, gorm.ErrRecordNotFound):
		k := APIKey{IPAddress: ip, KeyHash: hash, KeySuffix: suffix, Label: SelfServiceLabel, IsActive: true, CreatedAt: now}
		if err := db.Create(&k).Error; err != nil {
			return 0, keyWriteError(ip, err)
		}
		return k.ID, nil
	default:
		return 0, fmt.Errorf("look up revoked keys of %s: %w", ip, err)
	}
}

// keyWriteError maps a unique-index violation (one active key per IP, or a
// repeated hash) to ErrConflict.
func keyWriteError(ip string, err error) error {
	if IsUniqueViolation(err) {
		return ErrConflict
	}
	return fmt.Errorf("store API key of %s: %w", ip, err)
}

// IsUniqueViolation reports whether err is a unique-constraint violation on
// either dialect.
func IsUniqueViolation(err error) bool {
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "unique constraint") || strings.Contains(msg, "duplicate key") || strings.Contains(msg, "sqlstate 23505")
}

// RevokeActiveKey deactivates ip's active key and returns its id; false
// when it had none. (An address has at most one active key.)
func (s *Store) RevokeActiveKey(ctx context.Context, ip string, now time.Time) (int64, bool, error) {
	var ids []int64
	err := s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&APIKey{}).Where("ip_address = ? AND is_active", ip).Pluck("id", &ids).Error; err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		return tx.Exec("UPDATE api_keys SET is_active = FALSE, revoked_at = ? WHERE id IN ? AND is_active", now.UTC(), ids).Error
	})
	if err != nil {
		return 0, false, fmt.Errorf("revoke the key of %s: %w", ip, err)
	}
	if len(ids) == 0 {
		return 0, false, nil
	}
	return ids[0], true, nil
}
