package cacheadmin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// setUsed logs path's use (its last planned use) at at in its family's use
// log, as a plan's TouchCached does.
func setUsed(t *testing.T, path string, at time.Time) {
	t.Helper()
	if err := embedding.MarkUsed(filepath.Dir(path), []string{filepath.Base(path)}, at.UnixNano()); err != nil {
		t.Fatal(err)
	}
}

// TestGCEvictsLeastRecentlyUsedButNeverARunningJobsFiles: ten
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
				setUsed(t, p, time.Now())
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

// TestTouchCachedMarksUseAndNoticesAnEviction: a plan's TouchCached logs
// the use of the files it counted as cached (not the missing ones) in
// their family's use log and leaves the files' times alone (their inode
// change time is in the integrity record), so GC's order follows the use;
// it fails when a file is gone.
func TestTouchCachedMarksUseAndNoticesAnEviction(t *testing.T) {
	fx := newFixture(t, 2)
	ctx := context.Background()
	if _, err := embedding.ComputeStep(ctx, fx.l, "methodh_esm2_last_mean", fx.ids, fx.seqs, nil); err != nil {
		t.Fatal(err)
	}
	f, _ := embedding.FamilyByName(famH)
	dir := fx.l.FamilyDir(f)
	p0 := filepath.Join(dir, fx.ids[0]+f.Suffix())
	p1 := filepath.Join(dir, fx.ids[1]+f.Suffix())
	setUsed(t, p0, time.Now().Add(-48*time.Hour))
	setUsed(t, p1, time.Now().Add(-24*time.Hour))
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
	if after.Atim != before.Atim || after.Mtim != before.Mtim || after.Ctim != before.Ctim {
		t.Fatalf("times moved: atime %v→%v mtime %v→%v ctime %v→%v", before.Atim, after.Atim, before.Mtim, after.Mtim, before.Ctim, after.Ctim)
	}
	uses, _, err := embedding.ReadUses(dir, func(string) bool { return true })
	if err != nil || time.Since(time.Unix(0, uses[filepath.Base(p0)])) > time.Minute {
		t.Fatalf("use of file 0 not logged: %v %v", uses, err)
	}
	// File 0 is now the more recently used: a budget of one file evicts 1.
	fi, _ := os.Stat(p0)
	if res, err := GC(ctx, fx.l, GCOptions{Budget: fi.Size()}); err != nil || res.Evicted != 1 {
		t.Fatalf("pass: %+v %v", res, err)
	}
	if _, err := os.Stat(p1); !os.IsNotExist(err) {
		t.Fatalf("file 1, the least recently used, kept: %v", err)
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
		setUsed(t, path(i), base.Add(time.Duration(i)*time.Hour))
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
	qdir := fx.l.QuarantineFolder(f)
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

// TestAJobsUseKeepsTheQuickCheckValid: a job's plan counts cached files,
// marks them used (TouchCached) and its method reads them; the check
// after the read finds every file still matching its record by stat (none
// to hash), the next plan hashes none, and `cache status` counts no
// mismatch. Marking a use on the file (its access time) moved its inode
// change time, which the record holds, so each of these failed for every
// file a job had used.
func TestAJobsUseKeepsTheQuickCheckValid(t *testing.T) {
	fx := newFixture(t, 4)
	ctx := context.Background()
	if _, err := embedding.ComputeStep(ctx, fx.l, "methodh_esm2_last_mean", fx.ids, fx.seqs, nil); err != nil {
		t.Fatal(err)
	}
	plan := func() *embedding.Plan {
		t.Helper()
		p, err := fx.l.BuildPlan(ctx, embedding.PlanRequest{MethodKey: "H", Target: methods.Kcat,
			Profile: methods.ProfileMethodHESM2LastMean, SeqIDs: fx.ids, SeqIDToSeq: fx.seqs, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := plan()
	if p.CachedAlready != 4 || p.Integrity == nil || p.Integrity.Checked != 4 || p.Integrity.Hashed != 0 || len(p.Integrity.Bad) != 0 {
		t.Fatalf("first plan: cached %d, %+v", p.CachedAlready, p.Integrity)
	}
	if err := p.TouchCached(); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, sid := range fx.ids {
		for _, path := range p.ExpectedPathsBySeq[sid] {
			if _, err := os.ReadFile(path); err != nil { // the method's read
				t.Fatal(err)
			}
			paths = append(paths, path)
		}
	}
	if changed := fx.l.ChangedSinceCheck(paths); len(changed) != 0 {
		t.Fatalf("after the job's use, %d of %d files fail the quick check: %v", len(changed), len(paths), changed)
	}
	if p := plan(); p.Integrity.Hashed != 0 || p.Integrity.Recorded != 0 || p.CachedAlready != 4 {
		t.Fatalf("next plan: %+v", p.Integrity)
	}
	st, err := Status(fx.l)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Family == famH && (s.Files != 4 || s.Mismatched != 0 || s.Unhashed != 0) {
			t.Fatalf("status after the job: %+v", s)
		}
	}
}

// TestStatusAndVerifyReportAForgedRecord: with a record key, a manifest
// record rewritten to match new bytes without the key (size, times, inode
// and SHA-256 all agree) is counted Forged by `cache status`, not as a
// mismatch, and the check `cache verify` runs (every file hashed) sets its
// file aside as forged, though its SHA-256 agrees (so the command exits
// non-zero).
func TestStatusAndVerifyReportAForgedRecord(t *testing.T) {
	embedding.SetRecordKey([]byte("the writers' record key, outside the media root"))
	t.Cleanup(func() { embedding.SetRecordKey(nil) })
	fx := newFixture(t, 3)
	ctx := context.Background()
	if _, err := embedding.ComputeStep(ctx, fx.l, "methodh_esm2_last_mean", fx.ids, fx.seqs, nil); err != nil {
		t.Fatal(err)
	}
	f, _ := embedding.FamilyByName(famH)
	dir := fx.l.FamilyDir(f)
	// The forger: other bytes, and a record to match them.
	fx.plant(t, famH, fx.ids[1], fx.ids[2])
	path := filepath.Join(dir, fx.ids[1]+f.Suffix())
	body, _ := os.ReadFile(path)
	st, _ := embedding.StatFile(path)
	var doc map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, embedding.ManifestName))
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	e := doc["entries"].(map[string]any)[fx.ids[1]].(map[string]any)
	e["bytes"], e["mtime_ns"], e["ctime_ns"], e["ino"], e["sha256"] = st.Bytes, st.MtimeNs, st.CtimeNs, st.Ino, hex.EncodeToString(sum[:])
	b, _ = json.Marshal(doc)
	if err := os.WriteFile(filepath.Join(dir, embedding.ManifestName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	sts, err := Status(fx.l)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sts {
		if s.Family == famH && (s.Forged != 1 || s.Mismatched != 0 || s.Unauthenticated != 0) {
			t.Fatalf("status: %+v", s)
		}
	}
	// Verify's hash of every file (its checkAll), which its command turns
	// into a non-zero exit when a file is set aside.
	in, err := checkAll(fx.l, f, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Bad) != 1 || in.Bad[0].SeqID != fx.ids[1] || in.Bad[0].Reason != embedding.ForgedReason {
		t.Fatalf("verify: %+v", in)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("forged file left in place: %v", err)
	}
}

// TestGCOnReferenceFolders: with the reference naming the pass counts
// method D's files in esm1b_turnup/ and the copies set aside in
// .quarantine/esm1b_turnup/, and expires those past QuarantineKeep there.
func TestGCOnReferenceFolders(t *testing.T) {
	fx := newFixture(t, 3)
	fx.l.Folders = embedding.FoldersReference
	ctx := context.Background()
	if _, err := embedding.ComputeStep(ctx, fx.l, "methodd_esm1b", fx.ids, fx.seqs, nil); err != nil {
		t.Fatal(err)
	}
	f, _ := embedding.FamilyByName(embedding.FamilyESM1bMethodD)
	fi, err := os.Stat(filepath.Join(fx.l.SequenceInfo(), "esm1b_turnup", fx.ids[0]+".npy"))
	if err != nil {
		t.Fatal(err)
	}
	size := fi.Size()
	qdir := filepath.Join(fx.l.SequenceInfo(), embedding.QuarantineDir, "esm1b_turnup")
	if fx.l.QuarantineFolder(f) != qdir {
		t.Fatalf("quarantine folder %s", fx.l.QuarantineFolder(f))
	}
	if err := os.MkdirAll(qdir, 0o755); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(qdir, fmt.Sprintf("%s.npy.%d", fx.ids[0], time.Now().Add(-QuarantineKeep-time.Hour).UnixNano()))
	if err := os.WriteFile(old, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := GC(ctx, fx.l, GCOptions{})
	if err != nil || res.Files != 4 || res.Quarantined != 1 || res.Bytes != 4*size {
		t.Fatalf("measuring pass: %+v %v", res, err)
	}
	res, err = GC(ctx, fx.l, GCOptions{Budget: 10 * size})
	if _, serr := os.Stat(old); err != nil || res.QuarantineExpired != 1 || !os.IsNotExist(serr) {
		t.Fatalf("expiring pass: %+v %v %v", res, err, serr)
	}
}
