package cacheadmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/store"
)

// Cache budget. GC evicts the least recently used embedding
// artefacts until the cache fits a byte budget, and never a file a running
// job counts on:
//
//   - "Used" is the file's last use in its family's use log (embedding
//     UseLogName). A stage's plan (activities BuildPlan) logs every file it
//     counted as cached, after writing its plan.json
//     (embedding.Plan.TouchCached), so the LRU order is the order of last
//     planned use. A file never logged (a cache from before the log) falls
//     back to its access time, which older planners set. The file itself
//     is never touched: that would move the inode change time its
//     integrity record holds.
//   - Protected are the files in the plan.json of every stage of a job
//     still Pending or Processing (every file it expects, cached or
//     computed), the paths of artefact claims, and files used within
//     MinAge.
//   - A plan that counted a file before GC read the protected set is caught
//     without a lock: GC renames a victim to a hidden name, then reads
//     what its use log gained since the scan (and stats it again, for an
//     older planner's access time); a use logged since means a planner
//     counted it, and it is renamed back. A planner logs the use before it
//     stats the file, so one whose stat finds the file gone plans again
//     (and computes it). Either way no running job counts on a file that
//     is removed.

// GCOptions tune one GC pass.
type GCOptions struct {
	// Budget is the most bytes the cache may hold after the pass; 0 only
	// measures.
	Budget int64
	// MinAge spares files used (planned) more recently than this.
	MinAge time.Duration
	// Protected lists the files running jobs count on (RunningJobFiles).
	Protected func(ctx context.Context) (map[string]bool, error)
	// DryRun chooses victims without removing them.
	DryRun bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// beforeRemove is a test hook run between a victim's scan and its
	// removal.
	beforeRemove func(path string)
}

// GCResult says what a pass found and did.
type GCResult struct {
	// Files and Bytes are the cache's size before the pass.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// Evicted and EvictedBytes are what it removed.
	Evicted      int   `json:"evicted"`
	EvictedBytes int64 `json:"evicted_bytes"`
	// Protected counts the files spared because a running job counts on
	// them or they were used within MinAge; Restored those a planner
	// touched while they were being removed.
	Protected int `json:"protected"`
	Restored  int `json:"restored"`
	// Quarantined and QuarantinedBytes are the copies integrity checks set
	// aside (sequence_info/.quarantine), counted in Files and Bytes: they
	// take the same disk. QuarantineExpired counts those removed for age
	// (QuarantineKeep) or, first of all files, for the budget.
	Quarantined       int   `json:"quarantined"`
	QuarantinedBytes  int64 `json:"quarantined_bytes"`
	QuarantineExpired int   `json:"quarantine_expired"`
}

// QuarantineKeep is how long a quarantined copy is kept for an operator to
// look at (`cache status` lists them) before GC removes it; over the
// budget, quarantined copies go before any cached file, oldest first.
const QuarantineKeep = 7 * 24 * time.Hour

// quarantined is one set-aside copy: its path, size and when it was set
// aside (the nanoseconds its name ends with).
type quarantined struct {
	path string
	size int64
	at   int64
}

// scanQuarantine lists the quarantined copies of every family of l
// (Layout.Quarantined), oldest first.
func scanQuarantine(l *embedding.Layout) []quarantined {
	var out []quarantined
	for _, f := range Families(l) {
		names, err := l.Quarantined(f)
		if err != nil {
			continue
		}
		qdir := l.QuarantineFolder(f)
		for _, name := range names {
			p := filepath.Join(qdir, name)
			info, err := os.Lstat(p)
			if err != nil {
				continue
			}
			at := info.ModTime().UnixNano()
			if i := strings.LastIndexByte(name, '.'); i >= 0 {
				if ns, err := strconv.ParseInt(name[i+1:], 10, 64); err == nil {
					at = ns
				}
			}
			out = append(out, quarantined{path: p, size: info.Size(), at: at})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

// removeQuarantined removes a quarantined copy and its reason file.
func removeQuarantined(q quarantined) error {
	if err := os.Remove(q.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	_ = os.Remove(q.path + embedding.QuarantineReasonSuffix)
	return nil
}

type cached struct {
	path, dir, sid string
	size           int64
	// used is its last logged use, else its access time (atime).
	used, atime int64
	// mark is where its family's use log stood at the scan.
	mark embedding.UseMark
}

// gcHidden prefixes a victim between its rename and its removal; readers
// ignore hidden names.
const gcHidden = ".gc-"

// GC runs one pass over every family of l.
func GC(ctx context.Context, l *embedding.Layout, o GCOptions) (GCResult, error) {
	var res GCResult
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	var files []cached
	for _, f := range Families(l) {
		dir := l.FamilyDir(f)
		removeStaleHidden(dir, now())
		have, err := artefacts(dir, f.Suffix())
		if err != nil {
			return res, err
		}
		uses, mark, err := embedding.ReadUses(dir, func(name string) bool {
			_, ok := have[strings.TrimSuffix(name, f.Suffix())]
			return ok
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return res, fmt.Errorf("read the use log of %s: %w", f.Name, err)
		}
		for sid := range have {
			p := filepath.Join(dir, sid+f.Suffix())
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				continue
			}
			used, ok := uses[sid+f.Suffix()]
			if !ok {
				used = st.Atim.Nano()
			}
			files = append(files, cached{path: p, dir: dir, sid: sid, size: st.Size, used: used, atime: st.Atim.Nano(), mark: mark})
			res.Files++
			res.Bytes += st.Size
		}
	}
	// Quarantined copies take disk like the cache: counted, removed after
	// QuarantineKeep, and first when over the budget (oldest first). A dry
	// run counts what it would remove; a pass without a budget only
	// measures.
	quar := scanQuarantine(l)
	for _, q := range quar {
		res.Quarantined++
		res.QuarantinedBytes += q.size
		res.Files++
		res.Bytes += q.size
	}
	size := res.Bytes
	expireBefore := now().Add(-QuarantineKeep).UnixNano()
	for _, q := range quar {
		if o.Budget <= 0 || q.at >= expireBefore && size <= o.Budget {
			continue // measuring only, or young and within the budget
		}
		if !o.DryRun {
			if err := removeQuarantined(q); err != nil {
				return res, err
			}
		}
		res.QuarantineExpired++
		size -= q.size
	}
	if o.Budget <= 0 || size <= o.Budget || ctx.Err() != nil {
		return res, ctx.Err()
	}
	protected := map[string]bool{}
	if o.Protected != nil {
		var err error
		if protected, err = o.Protected(ctx); err != nil {
			return res, err
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].used < files[j].used })
	cutoff := now().Add(-o.MinAge).UnixNano()
	removed := map[string]map[string]string{} // family dir → seq id → the path removed
	for _, c := range files {
		if size <= o.Budget || ctx.Err() != nil {
			break
		}
		if protected[cacheKey(c.path)] || c.used > cutoff {
			res.Protected++
			continue
		}
		if o.DryRun {
			res.Evicted++
			res.EvictedBytes += c.size
			size -= c.size
			continue
		}
		if o.beforeRemove != nil {
			o.beforeRemove(c.path)
		}
		ok, err := evict(c)
		if err != nil {
			return res, err
		}
		if !ok {
			res.Restored++
			continue
		}
		if removed[c.dir] == nil {
			removed[c.dir] = map[string]string{}
		}
		removed[c.dir][c.sid] = c.path
		res.Evicted++
		res.EvictedBytes += c.size
		size -= c.size
	}
	for dir, files := range removed {
		if err := embedding.ForgetRemoved(dir, files); err != nil {
			return res, err
		}
	}
	return res, ctx.Err()
}

// evict removes c unless a planner used it since its scan (then it is
// put back and evict answers false).
func evict(c cached) (bool, error) {
	hidden := filepath.Join(c.dir, gcHidden+filepath.Base(c.path))
	if err := os.Rename(c.path, hidden); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil // gone already (a purge, a Cleanup)
		}
		return false, err
	}
	var st unix.Stat_t
	if err := unix.Lstat(hidden, &st); err != nil {
		return false, err
	}
	usedSince, err := embedding.UsedSince(c.dir, filepath.Base(c.path), c.mark, c.used)
	if err != nil {
		usedSince = true // unreadable: keep the file rather than guess
	}
	if usedSince || st.Atim.Nano() != c.atime {
		// Used by a plan between the scan and the rename: it counts on
		// the file, which goes back (the plan may have read it present).
		if err := os.Rename(hidden, c.path); err != nil {
			return false, err
		}
		return false, nil
	}
	if err := os.Remove(hidden); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// removeStaleHidden removes victims a GC that died left renamed.
func removeStaleHidden(dir string, now time.Time) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), gcHidden) {
			continue
		}
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > time.Hour {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// RunningJobFiles lists the files running jobs count on: every path in the
// plan.json of each stage of each Pending or Processing job, and every
// claimed path (store.ArtefactClaim).
func RunningJobFiles(st *store.Store, mediaRoot string) func(ctx context.Context) (map[string]bool, error) {
	return func(ctx context.Context) (map[string]bool, error) {
		out := map[string]bool{}
		after := ""
		for {
			jobs, err := st.RunningJobs(ctx, after, 500)
			if err != nil {
				return nil, err
			}
			for _, j := range jobs {
				plans, _ := filepath.Glob(jobfiles.StagePlanGlob(mediaRoot, j.ID))
				for _, pf := range plans {
					if err := addPlanPaths(pf, out); err != nil {
						return nil, err
					}
				}
			}
			if len(jobs) < 500 {
				break
			}
			after = jobs[len(jobs)-1].ID
		}
		var claimed []string
		if err := st.DB.WithContext(ctx).Model(&store.ArtefactClaim{}).Distinct().Pluck("path", &claimed).Error; err != nil {
			return nil, fmt.Errorf("list artefact claims: %w", err)
		}
		for _, p := range claimed {
			out[cacheKey(p)] = true
		}
		return out, nil
	}
}

func addPlanPaths(planFile string, out map[string]bool) error {
	b, err := os.ReadFile(planFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var p struct {
		Expected map[string][]string `json:"expected_paths_by_seq"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		// A plan being replaced is written atomically; an unreadable one
		// protects nothing we can name, so the pass stops rather than guess.
		return fmt.Errorf("read plan %s: %w", planFile, err)
	}
	for _, paths := range p.Expected {
		for _, path := range paths {
			out[cacheKey(path)] = true
		}
	}
	return nil
}

// cacheKey is a cache path from sequence_info/ on: the API process and the
// workers may mount the media root at different paths.
func cacheKey(p string) string {
	p = filepath.ToSlash(p)
	if i := strings.LastIndex(p, "/"+embedding.SequenceInfoDir+"/"); i >= 0 {
		return p[i+1:]
	}
	return p
}
