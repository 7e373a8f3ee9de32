package stepserver

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// serverSysProcAttr puts the server in a process group of its own (a stop
// reaches the processes a wrapper script starts) and has the kernel kill it
// when the gpu-worker dies, even by kill -9.
func serverSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// watchdogSysProcAttr puts the watchdog in the server's group. It has no
// parent-death signal: it must outlive the gpu-worker to kill the group.
func watchdogSysProcAttr(pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
}

// waitGroupGone waits until no live (non-zombie) process is in group pgid,
// or d has passed. Orphans of a killed group are reaped by init, which may
// be slow to do it (or not do it, in a container): a zombie holds no memory.
func waitGroupGone(pgid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if syscall.Kill(-pgid, 0) == syscall.ESRCH || !groupHasLive(pgid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		// Polling: the kernel has no notification for the exit of a
		// process that is not our child.
		time.Sleep(10 * time.Millisecond)
	}
}

// groupHasLive scans /proc for a process of group pgid that is not a zombie.
func groupHasLive(pgid int) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		state, pgrp, ok := procStat(pid)
		if ok && pgrp == pgid && state != "Z" && state != "X" {
			return true
		}
	}
	return false
}

// procStat reads a process's state and process group from /proc/pid/stat.
func procStat(pid int) (state string, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, false
	}
	// The command name is in parentheses and may contain spaces: the fields
	// we want follow its last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return "", 0, false
	}
	pgrp, err = strconv.Atoi(f[2])
	if err != nil {
		return "", 0, false
	}
	return f[0], pgrp, true
}
