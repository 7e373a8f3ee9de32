package fsutil

import (
	"errors"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// FreeBytes is the space available to unprivileged writers on the file
// system that holds path, and its size.
func FreeBytes(path string) (free, total uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	bs := uint64(st.Bsize) //nolint:gosec // a block size is positive
	return st.Bavail * bs, st.Blocks * bs, nil
}

// NoSpace reports whether err says a write failed for lack of space:
// ENOSPC or EDQUOT, or, through layers that keep only the text (a
// Temporal failure, a database driver), their messages and the databases'
// own ("could not extend file" from Postgres, "database or disk is full"
// from SQLite).
func NoSpace(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	return NoSpaceText(err.Error())
}

// NoSpaceText is NoSpace for an error's text alone.
func NoSpaceText(msg string) bool {
	m := strings.ToLower(msg)
	for _, s := range []string{"no space left on device", "disk quota exceeded", "could not extend file", "database or disk is full", "sqlstate 53100"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}
