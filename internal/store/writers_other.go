//go:build !unix

package store

// procsMark is not kept where POSIX record locks are missing: a SQLite
// Store there never counts itself alone (statuses keep their time-to-live).
type procsMark struct{}

func markOpen(string) *procsMark { return nil }

func (m *procsMark) alone() bool { return false }

func (m *procsMark) close() {}
