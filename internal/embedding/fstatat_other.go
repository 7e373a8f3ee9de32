//go:build !(linux && amd64)

package embedding

import "golang.org/x/sys/unix"

// fstatatName stats name (NUL-terminated in buf) relative to the folder
// dfd without following a symlink.
func fstatatName(dfd int, buf []byte, st *unix.Stat_t) error {
	return unix.Fstatat(dfd, string(buf[:len(buf)-1]), st, unix.AT_SYMLINK_NOFOLLOW)
}
