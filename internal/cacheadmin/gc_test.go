package cacheadmin

import (
	"context"
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
		fx := newFixture(t, 10)
		ctx := context.Background()
		if _, err := embedding.ComputeStep(ctx, fx.l, "methodh_esm2_last_mean", fx.ids, fx.seqs, nil); err != nil {
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
