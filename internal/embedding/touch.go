package embedding

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// TouchCached sets the access time of the files the plan counted as cached
// (its expected paths that are not missing): their last use, the order in
// which `kinflow cache gc` (internal/cacheadmin) evicts, least recently used
// first. Called after the plan's plan.json is written (issue 33). An error
// wrapping fs.ErrNotExist means a file went (evicted, purged) after the
// plan counted it: plan again.
func (p *Plan) TouchCached() error {
	now := unix.NsecToTimespec(time.Now().UnixNano())
	omit := unix.Timespec{Nsec: unix.UTIME_OMIT}
	for sid, paths := range p.ExpectedPathsBySeq {
		missing := map[string]bool{}
		for _, m := range p.MissingPathsBySeq[sid] {
			missing[m] = true
		}
		for _, path := range paths {
			if missing[path] {
				continue
			}
			// The modification time stays: integrity records compare it.
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{now, omit}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, syscall.ENOENT) {
					return fmt.Errorf("cached file %s went while the plan counted it: %w", filepath.Base(path), fs.ErrNotExist)
				}
				return fmt.Errorf("mark cached file used: %w", err)
			}
		}
	}
	return nil
}
