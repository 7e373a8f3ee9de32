package embedding

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kinflow/kinflow/internal/fsutil"
)

// The last use of a cached file, the order in which `kinflow cache gc`
// (internal/cacheadmin) evicts, least recently used first, is kept in a
// per-family use log, never on the file itself: setting a file's access
// time moves its inode change time, which its integrity record holds, so
// every file a job used would fail the check's stat comparison afterwards
// and be hashed again (and `cache status` would call it mismatched).
//
// The log is `<family dir>/.used`, one line per use, "<file name>
// <unix nanoseconds>\n", appended under its own lock (not the manifest's:
// a plan never waits for a writer's merge); a hidden name, so no listing
// counts it. GC compacts it to the latest use of each file present.

// UseLogName is a family folder's use log.
const UseLogName = ".used"

// useLockName serialises appends to the use log and its compaction.
const useLockName = ".used.lock"

// TouchCached records the use of the files the plan counted as cached (its
// expected paths that are not missing) in their families' use logs, then
// checks they are still there. Called after the plan's plan.json is
// written. An error wrapping fs.ErrNotExist means a file went (evicted,
// purged) after the plan counted it: plan again.
func (p *Plan) TouchCached() error {
	byDir := map[string][]string{}
	var dirs []string
	for sid, paths := range p.ExpectedPathsBySeq {
		missing := map[string]bool{}
		for _, m := range p.MissingPathsBySeq[sid] {
			missing[m] = true
		}
		for _, path := range paths {
			if missing[path] {
				continue
			}
			d := filepath.Dir(path)
			if _, ok := byDir[d]; !ok {
				dirs = append(dirs, d)
			}
			byDir[d] = append(byDir[d], path)
		}
	}
	now := time.Now().UnixNano()
	for _, dir := range dirs {
		names := make([]string, len(byDir[dir]))
		for i, path := range byDir[dir] {
			names[i] = filepath.Base(path)
		}
		if err := MarkUsed(dir, names, now); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("cached files of %s went while the plan counted them: %w", filepath.Base(dir), fs.ErrNotExist)
			}
			return fmt.Errorf("mark cached files used: %w", err)
		}
		// The use is logged before this stat: a GC that renamed the file
		// away after it reads the log and puts the file back, and one that
		// renamed it before is seen here (cacheadmin.evict).
		for _, path := range byDir[dir] {
			var st unix.Stat_t
			if err := unix.Lstat(path, &st); err != nil {
				if errors.Is(err, unix.ENOENT) {
					return fmt.Errorf("cached file %s went while the plan counted it: %w", filepath.Base(path), fs.ErrNotExist)
				}
				return fmt.Errorf("mark cached file used: %w", err)
			}
		}
	}
	return nil
}

// MarkUsed appends the use of the files names (of folder dir) at time at
// (Unix nanoseconds) to dir's use log.
func MarkUsed(dir string, names []string, at int64) error {
	if len(names) == 0 {
		return nil
	}
	unlock, err := lockFile(filepath.Join(dir, useLockName), true)
	if err != nil {
		return err
	}
	defer unlock()
	var b []byte
	ts := strconv.FormatInt(at, 10)
	for _, n := range names {
		b = append(append(append(append(b, n...), ' '), ts...), '\n')
	}
	f, err := os.OpenFile(filepath.Join(dir, UseLogName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// UseMark is where a use log stood when it was read: a later UsedSince
// reads only what was appended since.
type UseMark struct {
	ino  uint64
	size int64
}

// parseUses adds the uses in r to out (the latest per name); malformed
// lines are skipped. It returns how many lines it read.
func parseUses(r io.Reader, out map[string]int64) int {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		i := bytes.LastIndexByte(line, ' ')
		if i <= 0 {
			continue
		}
		at, err := strconv.ParseInt(string(line[i+1:]), 10, 64)
		if err != nil {
			continue
		}
		if name := string(line[:i]); at > out[name] {
			out[name] = at
		}
	}
	return n
}

// ReadUses returns the latest logged use of each file of dir by name, and
// the log's mark. When the log holds many more lines than files, it is
// compacted first to the latest use of each name for which keep is true
// (the files present), under the log's lock.
func ReadUses(dir string, keep func(name string) bool) (map[string]int64, UseMark, error) {
	unlock, err := lockFile(filepath.Join(dir, useLockName), true)
	if err != nil {
		return nil, UseMark{}, err
	}
	defer unlock()
	path := filepath.Join(dir, UseLogName)
	uses := map[string]int64{}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return uses, UseMark{}, nil
	}
	if err != nil {
		return nil, UseMark{}, err
	}
	lines := parseUses(f, uses)
	_ = f.Close()
	for name := range uses {
		if !keep(name) {
			delete(uses, name)
		}
	}
	if lines > 2*len(uses)+1024 {
		var b []byte
		for name, at := range uses {
			b = append(append(append(append(b, name...), ' '), strconv.FormatInt(at, 10)...), '\n')
		}
		if err := fsutil.WriteFileAtomic(path, b, 0o644); err != nil {
			return nil, UseMark{}, fmt.Errorf("compact use log: %w", err)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, UseMark{}, err
	}
	return uses, UseMark{ino: st.Ino, size: st.Size}, nil
}

// UsedSince reports whether dir's use log holds a use of name logged
// after mark, or, when the log was replaced since, a use later than after.
func UsedSince(dir, name string, mark UseMark, after int64) (bool, error) {
	f, err := os.Open(filepath.Join(dir, UseLogName))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false, err
	}
	uses := map[string]int64{}
	if st.Ino == mark.ino && st.Size >= mark.size {
		if _, err := f.Seek(mark.size, io.SeekStart); err != nil {
			return false, err
		}
		parseUses(f, uses)
		_, ok := uses[name]
		return ok, nil
	}
	parseUses(f, uses)
	return uses[name] > after, nil
}
