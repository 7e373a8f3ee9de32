package store

import (
	"io/fs"

	"gorm.io/gorm"
)

// ClaimsLockID is claimsLockID for the external tests (claims_test.go holds
// the lock from another session).
const ClaimsLockID = claimsLockID

// PreparedCount is how many statements GORM's prepared-statement cache of s
// holds; ok is false when s has no such cache.
func PreparedCount(s *Store) (n int, ok bool) {
	pool := s.DB.ConnPool
	if g, isGate := pool.(*writeGate); isGate {
		pool = g.ConnPool
	}
	p, ok := pool.(*gorm.PreparedStmtDB)
	if !ok || p.Stmts == nil {
		return 0, false
	}
	return len(p.Stmts.Keys()), true
}

// SetMigrationSource makes s read its migrations from fsys (laid out as the
// embedded files: migrations/<dialect>/NNNN_name.sql) instead of the
// embedded ones, as a newer or older release would.
func SetMigrationSource(s *Store, fsys fs.FS) { s.migrationFS = fsys }

// MigrationFiles are the embedded migrations.
var MigrationFiles fs.FS = migrationFiles
