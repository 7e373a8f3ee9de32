package cacheadmin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// setAtime sets path's access time (its last planned use), keeping its
// modification time.
func setAtime(t *testing.T, path string, at time.Time) {
	t.Helper()
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), {Nsec: unix.UTIME_OMIT}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, 0); err != nil {
		t.Fatal(err)
	}
}

// TestGCEvictsLeastRecentlyUsedButNeverARunningJobsFiles (issue 33): ten
// cached files, used an hour apart. A budget of five files' bytes evicts
// the oldest files except the two a running job's plan counts on and the
// one a stage has claimed; a file planned while it is being evicted is put
// back; a finished job's plan protects nothing; manifest entries of evicted
// files go. On both databases.
func TestGCEvictsLeastRecentlyUsedButNeverARunningJobsFiles(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		fx, f, dir, path, size := gcFixture(t, 10)
		ctx := context.Background()
		media := fx.l.MediaRoot
		// A running job's plan counts on files 0 and 1; a finished job's on 3.
		now := time.Now().UTC()
		for id, status := range map[string]string{"runningjob": store.JobProcessing, "finishedjob": store.JobCompleted} {
			if err := st.DB.Create(&store.Job{ID: id, Status: status, SubmittedAt: now}).Error; err != nil {
				t.Fatal(err)
			}
			plan := &embedding.Plan{ExpectedPathsBySeq: map[string][]string{}}
			counted := []int{0, 1}
			if status == store.JobCompleted {
				counted = []int{3}
			}
			for _, i := range counted {
				// The worker's path may differ from ours before sequence_info/.
				plan.ExpectedPathsBySeq[fx.ids[i]] = []string{"/worker/mount/" + embedding.SequenceInfoDir + "/" + famH + "/" + fx.ids[i] + f.Suffix()}
			}
			if err := fsutil.WriteJSONAtomic(filepath.Join(media, "jobs", id, "work", "stage-0", "plan.json"), plan); err != nil {
				t.Fatal(err)
			}
		}
		// A stage's claim on file 2.
		if err := st.ClaimArtefacts(ctx, "runningjob", 0, []string{path(2)}); err != nil {
			t.Fatal(err)
		}
		opts := GCOptions{Budget: 5 * size, Protected: RunningJobFiles(st, media)}
		// A planner touches file 4 between the scan and its eviction.
		opts.beforeRemove = func(p string) {
			if p == path(4) {
				setAtime(t, p, time.Now())
			}
		}
		res, err := GC(ctx, fx.l, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", res)
		if res.Files != 10 || res.Bytes != 10*size || res.Restored != 1 || res.Evicted != 5 || res.Protected != 3 {
			t.Fatalf("result %+v", res)
		}
		kept := map[int]bool{0: true, 1: true, 2: true, 4: true, 9: true}
		manifest := embedding.ReadManifest(dir)
		for i := range fx.ids {
			_, err := os.Stat(path(i))
			_, inManifest := manifest[fx.ids[i]]
			if kept[i] != (err == nil) || kept[i] != inManifest {
				t.Errorf("file %d: kept=%v stat=%v manifest=%v", i, kept[i], err, inManifest)
			}
		}
		// No hidden victim left behind.
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if len(e.Name()) > len(gcHidden) && e.Name()[:len(gcHidden)] == gcHidden {
				t.Errorf("left %s", e.Name())
			}
		}
		// Within budget now: a second pass evicts nothing.
		if res, err := GC(ctx, fx.l, GCOptions{Budget: 5 * size, Protected: RunningJobFiles(st, media)}); err != nil || res.Evicted != 0 {
			t.Fatalf("second pass: %+v %v", res, err)
		}
		// MinAge spares recent use: file 9 was used 15 h ago.
		if res, err := GC(ctx, fx.l, GCOptions{Budget: 1, MinAge: 16 * time.Hour, Protected: RunningJobFiles(st, media)}); err != nil || res.Evicted != 0 {
			t.Fatalf("min-age pass: %+v %v", res, err)
		}
	})
}

// TestTouchCachedMarksUseAndNoticesAnEviction: a plan's TouchCached sets
// the access time of the files it counted as cached (not the missing ones,
// not the modification time), and fails when one is gone.
func TestTouchCachedMarksUseAndNoticesAnEviction(t *testing.T) {
	fx := newFixture(t, 2)
	ctx := context.Background()
	if _, err := embedding.ComputeStep(ctx, fx.l, "methodh_esm2_last_mean", fx.ids, fx.seqs, nil); err != nil {
		t.Fatal(err)
	}
	f, _ := embedding.FamilyByName(famH)
	p0 := filepath.Join(fx.l.FamilyDir(f), fx.ids[0]+f.Suffix())
	old := time.Now().Add(-48 * time.Hour)
	setAtime(t, p0, old)
	var before unix.Stat_t
	_ = unix.Stat(p0, &before)
	plan := &embedding.Plan{
		ExpectedPathsBySeq: map[string][]string{fx.ids[0]: {p0}, "missing": {"/nonexistent/x.pt"}},
		MissingPathsBySeq:  map[string][]string{"missing": {"/nonexistent/x.pt"}},
	}
	if err := plan.TouchCached(); err != nil {
		t.Fatal(err)
	}
	var after unix.Stat_t
	_ = unix.Stat(p0, &after)
	if time.Since(time.Unix(0, after.Atim.Nano())) > time.Minute || after.Mtim != before.Mtim {
		t.Fatalf("atime %v mtime %v → %v", time.Unix(0, after.Atim.Nano()), before.Mtim, after.Mtim)
	}
	_ = os.Remove(p0)
	if err := plan.TouchCached(); err == nil {
		t.Fatal("a file evicted after the plan counted it went unnoticed")
	}
}

// gcFixture computes n files of family H, used an hour apart (file 0 the
// least recently), and returns the fixture, the family, its folder, each
// file's path and the size of one.
func gcFixture(t *testing.T, n int) (*fixture, embedding.Family, string, func(int) string, int64) {
	t.Helper()
	fx := newFixture(t, n)
	if _, err := embedding.ComputeStep(context.Background(), fx.l, "methodh_esm2_last_mean", fx.ids, fx.seqs, nil); err != nil {
		t.Fatal(err)
	}
	f, _ := embedding.FamilyByName(famH)
	dir := fx.l.FamilyDir(f)
	path := func(i int) string { return filepath.Join(dir, fx.ids[i]+f.Suffix()) }
	base := time.Now().Add(-24 * time.Hour)
	var size int64
	for i := range fx.ids {
		setAtime(t, path(i), base.Add(time.Duration(i)*time.Hour))
		fi, err := os.Stat(path(i))
		if err != nil {
			t.Fatal(err)
		}
		size = fi.Size()
	}
	return fx, f, dir, path, size
}

// TestGCKeepsTheRecordOfAFileComputedDuringThePass: a job that finds an
// evicted file missing computes it again while the pass goes on; the pass
// drops the records of the files it removed only, so the new file keeps the
// record its writer merged (and passes the next integrity check instead of
// being quarantined and computed a third time).
func TestGCKeepsTheRecordOfAFileComputedDuringThePass(t *testing.T) {
	fx, _, dir, path, size := gcFixture(t, 4)
	ctx := context.Background()
	opts := GCOptions{Budget: 2 * size}
	// File 0 goes first; while file 1 is being evicted, a job writes file
	// 0 again, with its record.
	opts.beforeRemove = func(p string) {
		if p != path(1) {
			return
		}
		if _, err := os.Stat(path(0)); !os.IsNotExist(err) {
			t.Errorf("file 0 not evicted first: %v", err)
		}
		if _, err := embedding.ComputeStep(ctx, fx.l, "methodh_esm2_last_mean", fx.ids[:1], fx.seqs, nil); err != nil {
			t.Error(err)
		}
	}
	res, err := GC(ctx, fx.l, opts)
	if err != nil || res.Evicted != 2 {
		t.Fatalf("pass: %+v %v", res, err)
	}
	manifest := embedding.ReadManifest(dir)
	for i, want := range []bool{true, false, true, true} {
		_, statErr := os.Stat(path(i))
		_, recorded := manifest[fx.ids[i]]
		if (statErr == nil) != want || recorded != want {
			t.Errorf("file %d: present %v, recorded %v; want both %v", i, statErr == nil, recorded, want)
		}
	}
}

// TestGCCountsAndExpiresQuarantinedCopies: copies set aside by integrity
// checks count against the budget, go after QuarantineKeep, and go first
// (oldest first) when the cache is over its budget; a pass without a
// budget removes nothing.
func TestGCCountsAndExpiresQuarantinedCopies(t *testing.T) {
	fx, f, _, path, size := gcFixture(t, 3)
	ctx := context.Background()
	qdir := filepath.Join(fx.l.SequenceInfo(), embedding.QuarantineDir, filepath.FromSlash(f.Dir))
	if err := os.MkdirAll(qdir, 0o755); err != nil {
		t.Fatal(err)
	}
	quarantine := func(i int, age time.Duration) string {
		q := filepath.Join(qdir, fmt.Sprintf("%s%s.%d", fx.ids[i], f.Suffix(), time.Now().Add(-age).UnixNano()))
		if err := os.WriteFile(q, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(q+embedding.QuarantineReasonSuffix, []byte("changed after its record\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return q
	}
	old := quarantine(0, QuarantineKeep+time.Hour)
	older := quarantine(1, 3*time.Hour)
	newer := quarantine(2, time.Hour)
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }

	// Measuring only: counted, nothing removed.
	res, err := GC(ctx, fx.l, GCOptions{})
	if err != nil || res.Quarantined != 3 || res.QuarantinedBytes != 3*size || res.Files != 6 || res.Bytes != 6*size || res.QuarantineExpired != 0 || !exists(old) {
		t.Fatalf("measuring pass: %+v %v", res, err)
	}
	// Within the budget: only the copy past QuarantineKeep goes.
	res, err = GC(ctx, fx.l, GCOptions{Budget: 10 * size})
	if err != nil || res.QuarantineExpired != 1 || res.Evicted != 0 || exists(old) || exists(old+embedding.QuarantineReasonSuffix) || !exists(older) || !exists(newer) {
		t.Fatalf("pass within the budget: %+v %v", res, err)
	}
	// Over the budget by one file: the oldest quarantined copy goes, no
	// cached file.
	res, err = GC(ctx, fx.l, GCOptions{Budget: 4 * size})
	if err != nil || res.QuarantineExpired != 1 || res.Evicted != 0 || exists(older) || !exists(newer) {
		t.Fatalf("pass one over the budget: %+v %v", res, err)
	}
	// Over by two: the last copy, then the least recently used file.
	res, err = GC(ctx, fx.l, GCOptions{Budget: 2 * size})
	if err != nil || res.QuarantineExpired != 1 || res.Evicted != 1 || exists(newer) || exists(path(0)) || !exists(path(1)) {
		t.Fatalf("pass two over the budget: %+v %v", res, err)
	}
}
