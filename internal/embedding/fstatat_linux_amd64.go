package embedding

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fstatatName stats name (NUL-terminated in buf) relative to the folder
// dfd without following a symlink. Unlike unix.Fstatat it copies nothing:
// the integrity check stats every cached file a stage reads.
func fstatatName(dfd int, buf []byte, st *unix.Stat_t) error {
	_, _, e := syscall.Syscall6(syscall.SYS_NEWFSTATAT, uintptr(dfd), uintptr(unsafe.Pointer(&buf[0])),
		uintptr(unsafe.Pointer(st)), unix.AT_SYMLINK_NOFOLLOW, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
