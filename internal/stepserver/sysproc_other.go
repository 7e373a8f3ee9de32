//go:build !linux

package stepserver

import (
	"syscall"
	"time"
)

// serverSysProcAttr puts the server in a process group of its own. Outside
// Linux there is no parent-death signal: the watchdog alone kills the group
// when the gpu-worker dies.
func serverSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// watchdogSysProcAttr puts the watchdog in the server's group.
func watchdogSysProcAttr(pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
}

// waitGroupGone waits until no process is in group pgid (zombies included:
// there is no portable way to tell them apart), or d has passed.
func waitGroupGone(pgid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for syscall.Kill(-pgid, 0) != syscall.ESRCH {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
