package fsutil

import (
	"errors"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kinflow/kinflow/internal/mediaroot"
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

// Unwritable reports whether err says a write failed because the file
// system cannot be written at all, whatever is written: mounted read-only
// (EROFS, as a disk with errors is remounted), refused by its permissions
// (EACCES, EPERM: a root that changed owner, an NFS export that squashes
// the writer), failing (EIO) or gone from under an NFS client (ESTALE), or
// a folder on the path that is a file (ENOTDIR: the layout under the root
// is broken), or a media root that is not there with the identity this
// process started with (mediaroot.ErrUnavailable: renamed away, a lost
// mount). Such a failure is the storage's, not the request's: a retry
// after an operator's fix succeeds. Lack of space is NoSpace's.
func Unwritable(err error) bool {
	if errors.Is(err, mediaroot.ErrUnavailable) {
		return true
	}
	for _, e := range []syscall.Errno{syscall.EROFS, syscall.EACCES, syscall.EPERM, syscall.EIO, syscall.ESTALE, syscall.ENOTDIR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
