package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"sync"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

func TestMigrateIsIdempotent(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatalf("second migrate: %v", err)
		}
		var n int64
		if err := s.DB.Table("migrations").Count(&n).Error; err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatal("no migration recorded")
		}
	})
}

// TestModelsMatchSchema checks that every field of every GORM model has its
// column in the schema the SQL migrations create.
func TestModelsMatchSchema(t *testing.T) {
	models := []any{&store.APIUser{}, &store.APIKey{}, &store.QuotaUsage{}, &store.Job{}, &store.JobStage{}, &store.JobEvent{}, &store.Sequence{}, &store.ArtefactClaim{}, &store.IdempotencyKey{}, &store.SchemaCompat{}}
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		for _, m := range models {
			sch, err := schema.Parse(m, &sync.Map{}, s.DB.NamingStrategy)
			if err != nil {
				t.Fatal(err)
			}
			if !s.DB.Migrator().HasTable(m) {
				t.Errorf("table %s missing", sch.Table)
				continue
			}
			for _, f := range sch.Fields {
				if f.DBName == "" {
					continue
				}
				if !s.DB.Migrator().HasColumn(m, f.DBName) {
					t.Errorf("%s.%s (field %s) has no column", sch.Table, f.DBName, f.Name)
				}
			}
		}
	})
}

func TestOneActiveKeyPerIPIsEnforcedByTheDatabase(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		now := time.Now().UTC()
		k1 := store.APIKey{IPAddress: "10.0.0.1", KeyHash: "h1", KeySuffix: "aaaaaa", IsActive: true, CreatedAt: now}
		if err := s.DB.Create(&k1).Error; err != nil {
			t.Fatal(err)
		}
		k2 := store.APIKey{IPAddress: "10.0.0.1", KeyHash: "h2", KeySuffix: "bbbbbb", IsActive: true, CreatedAt: now}
		err := s.DB.Create(&k2).Error
		if !errors.Is(err, gorm.ErrDuplicatedKey) {
			t.Fatalf("second active key for one IP: got %v, want a duplicate-key error", err)
		}
		// A revoked key does not count.
		if err := s.DB.Model(&k1).Update("is_active", false).Error; err != nil {
			t.Fatal(err)
		}
		k3 := store.APIKey{IPAddress: "10.0.0.1", KeyHash: "h3", KeySuffix: "cccccc", IsActive: true, CreatedAt: now}
		if err := s.DB.Create(&k3).Error; err != nil {
			t.Fatalf("active key after revoke: %v", err)
		}
	})
}

func TestTimesRoundTripInUTC(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		at := time.Date(2026, 3, 4, 14, 30, 0, 123456000, time.UTC)
		j := store.Job{ID: "abc", KeyID: 1, Status: "Pending", SubmittedAt: at, CanonicalizeSubstrates: false}
		if err := s.DB.Create(&j).Error; err != nil {
			t.Fatal(err)
		}
		var got store.Job
		if err := s.DB.First(&got, "id = ?", "abc").Error; err != nil {
			t.Fatal(err)
		}
		if !got.SubmittedAt.Equal(at) {
			t.Fatalf("submitted_at = %v, want %v", got.SubmittedAt, at)
		}
		// A false bool must be written as false, not replaced by the column's
		// default of true (GORM skips zero values of fields tagged with a default).
		if got.CanonicalizeSubstrates {
			t.Fatal("canonicalize_substrates: false was stored as true")
		}
	})
}
