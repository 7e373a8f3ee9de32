package embedding

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/provenance"
)

// benchSeqs returns n distinct 300-residue sequences with hash ids.
func benchSeqs(n int) ([]string, map[string]string) {
	ids := make([]string, n)
	m := make(map[string]string, n)
	const alphabet = "ACDEFGHIKLMNPQRSTVWY"
	for i := range ids {
		var b strings.Builder
		b.Grow(300)
		x := uint64(i)*2654435761 + 1
		for j := 0; j < 300; j++ {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			b.WriteByte(alphabet[x%20])
		}
		seq := b.String()
		ids[i] = BaseSeqID(seq)
		m[ids[i]] = seq
	}
	return ids, m
}

// admitFamily makes family f's folder and records it as a real writer's,
// as in production: the plan reads the record.
func admitFamily(b *testing.B, l *Layout, f Family) {
	b.Helper()
	if err := os.MkdirAll(l.FamilyDir(f), 0o755); err != nil {
		b.Fatal(err)
	}
	fp := provenance.Fingerprint{Model: f.Model, Weights: map[string]string{"weights.pt": "00"}}
	if _, err := provenance.Admit(l.FamilyDir(f), f.Name, fp); err != nil {
		b.Fatal(err)
	}
}

// warmMethodACache writes the 12 method A files (tiny, presence is what is
// measured) and a binding-site row per id, and returns every path.
func warmMethodACache(b *testing.B, l *Layout, ids []string, m map[string]string) []string {
	b.Helper()
	steps, err := l.ProfileSteps(methods.ProfileMethodAFull, methods.Kcat)
	if err != nil {
		b.Fatal(err)
	}
	var paths []string
	for _, s := range steps {
		for _, f := range s.Families {
			admitFamily(b, l, f)
			// Each file with its integrity record, as every writer leaves
			// it (integrity.go): the verified plan's fast path.
			sum := sha256.Sum256([]byte{0})
			commits := make([]Commit, 0, len(ids))
			for _, sid := range ids {
				p, _ := l.Path(f, sid)
				if err := os.WriteFile(p, []byte{0}, 0o644); err != nil {
					b.Fatal(err)
				}
				st, err := StatFile(p)
				if err != nil {
					b.Fatal(err)
				}
				commits = append(commits, Commit{SeqID: sid, Suffix: f.Suffix(), Bytes: 1, SHA256: hex.EncodeToString(sum[:]),
					MtimeNs: st.MtimeNs, CtimeNs: st.CtimeNs, Ino: st.Ino})
				paths = append(paths, p)
			}
			if err := MergeManifest(l.FamilyDir(f), commits, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	rows := make([]BindingSiteRow, len(ids))
	for i, sid := range ids {
		rows[i] = BindingSiteRow{SeqID: sid, Scores: SyntheticBindingSites(m[sid])}
	}
	if _, err := AppendBindingSites(l.BindingSiteTable(), rows); err != nil {
		b.Fatal(err)
	}
	return paths
}

// BenchmarkPlanMethodA10000 plans 10,000 sequences for method A on a warm
// cache (12 files and a binding-site row each, every family recorded by a
// real writer, planned for a real engine) and compares it, in the same
// run, with a bare loop that only stats the same 120,000 paths and the table.
func BenchmarkPlanMethodA10000(b *testing.B) {
	l := newLayoutB(b)
	ids, m := benchSeqs(10000)
	paths := warmMethodACache(b, l, ids, m)
	a, _ := methods.Default().Get("A-H")
	// RealOnly: the checked path of a real engine's plan.
	req := PlanRequest{MethodKey: a.Key, Target: methods.Kcat, Profile: a.Profile, SeqIDs: ids, SeqIDToSeq: m, RealOnly: true}
	ctx := context.Background()
	plan := func(b *testing.B) {
		p, err := l.BuildPlan(ctx, req)
		if err != nil || !p.Complete() || p.Total != 120000 {
			b.Fatalf("plan: %v (complete=%v)", err, p != nil && p.Complete())
		}
	}
	statLoop := func(b *testing.B) {
		for _, p := range paths {
			if _, err := os.Stat(p); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := os.Stat(l.BindingSiteTable()); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("plan", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			plan(b)
		}
	})
	verified := req
	verified.Verify = true
	planVerify := func(b *testing.B) {
		p, err := l.BuildPlan(ctx, verified)
		if err != nil || !p.Complete() || p.Integrity.Checked != 120000 || p.Integrity.Hashed != 0 || len(p.Integrity.Bad) != 0 {
			b.Fatalf("verified plan: %v %+v", err, p.Integrity)
		}
	}
	b.Run("planverify", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			planVerify(b)
		}
	})
	b.Run("statloop", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			statLoop(b)
		}
	})
	b.Run("ratio", func(b *testing.B) {
		var tp, ts time.Duration
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			plan(b)
			t1 := time.Now()
			statLoop(b)
			tp += t1.Sub(t0)
			ts += time.Since(t1)
		}
		b.ReportMetric(float64(tp.Milliseconds())/float64(b.N), "plan-ms/op")
		b.ReportMetric(float64(ts.Milliseconds())/float64(b.N), "stat-ms/op")
		b.ReportMetric(float64(tp)/float64(ts), "plan/stat")
	})
	// Planning plus the integrity check of every file (a stat each, each
	// family's manifest read once) against the bare stat loop.
	b.Run("verifyratio", func(b *testing.B) {
		var tp, ts time.Duration
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			planVerify(b)
			t1 := time.Now()
			statLoop(b)
			tp += t1.Sub(t0)
			ts += time.Since(t1)
		}
		b.ReportMetric(float64(tp.Milliseconds())/float64(b.N), "planverify-ms/op")
		b.ReportMetric(float64(ts.Milliseconds())/float64(b.N), "stat-ms/op")
		b.ReportMetric(float64(tp)/float64(ts), "planverify/stat")
	})
}

// BenchmarkPlan100000Memory plans 100,000 sequences for method A on an
// empty cache (the largest plan: every path is also a missing path) and
// reports the peak Go heap and the memory obtained from the OS, sampled
// every millisecond while planning. Goal: under 300 MB.
func BenchmarkPlan100000Memory(b *testing.B) {
	l := newLayoutB(b)
	ids, m := benchSeqs(100000)
	a, _ := methods.Default().Get("A-H")
	req := PlanRequest{MethodKey: a.Key, Target: methods.Kcat, Profile: a.Profile, SeqIDs: ids, SeqIDToSeq: m}
	var peakHeap, peakSys uint64
	for i := 0; i < b.N; i++ {
		runtime.GC()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ms runtime.MemStats
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			for {
				runtime.ReadMemStats(&ms)
				peakHeap = max(peakHeap, ms.HeapInuse)
				peakSys = max(peakSys, ms.Sys)
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}()
		p, err := l.BuildPlan(context.Background(), req)
		close(stop)
		wg.Wait()
		if err != nil || p.NeedComputation != 1200000 {
			b.Fatalf("plan: %v", err)
		}
		runtime.KeepAlive(p)
	}
	b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MB")
	b.ReportMetric(float64(peakSys)/(1<<20), "peak-sys-MB")
}

func newLayoutB(b *testing.B) *Layout {
	l, err := NewLayout(b.TempDir()+"/media", "", "", "")
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkPlanMethodA10000Mixed is BenchmarkPlanMethodA10000's worst case
// for provenance: every family holds files of two origins (a record with
// synthetic_files set and a manifest of 10,000 entries, one in ten flagged
// synthetic), so the real engine's plan reads each family's manifest once.
func BenchmarkPlanMethodA10000Mixed(b *testing.B) {
	l := newLayoutB(b)
	ids, m := benchSeqs(10000)
	paths := warmMethodACache(b, l, ids, m)
	steps, _ := l.ProfileSteps(methods.ProfileMethodAFull, methods.Kcat)
	for _, s := range steps {
		for _, f := range s.Families {
			commits := make([]Commit, len(ids))
			for i, sid := range ids {
				commits[i] = Commit{SeqID: sid, Suffix: f.Suffix(), Bytes: 1, Synthetic: i%10 == 0}
			}
			if err := MergeManifest(l.FamilyDir(f), commits, nil); err != nil {
				b.Fatal(err)
			}
			if _, err := provenance.Admit(l.FamilyDir(f), f.Name, provenance.Synthetic(s.Key)); err != nil {
				b.Fatal(err)
			}
		}
	}
	a, _ := methods.Default().Get("A-H")
	req := PlanRequest{MethodKey: a.Key, Target: methods.Kcat, Profile: a.Profile, SeqIDs: ids, SeqIDToSeq: m, RealOnly: true}
	var tp, ts time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		p, err := l.BuildPlan(context.Background(), req)
		if err != nil || p.SyntheticIgnored != 12000 {
			b.Fatalf("plan: %v (ignored %d)", err, p.SyntheticIgnored)
		}
		t1 := time.Now()
		for _, p := range paths {
			if _, err := os.Stat(p); err != nil {
				b.Fatal(err)
			}
		}
		tp += t1.Sub(t0)
		ts += time.Since(t1)
	}
	b.ReportMetric(float64(tp.Milliseconds())/float64(b.N), "plan-ms/op")
	b.ReportMetric(float64(ts.Milliseconds())/float64(b.N), "stat-ms/op")
	b.ReportMetric(float64(tp)/float64(ts), "plan/stat")
}

// BenchmarkPlanSmallJobOnLargeCache plans a 3-sequence method H job whose
// files are all cached, in a family of 100,000 recorded files: what one
// small job's plan costs once the cache is large (the family's manifest is
// read for the 3 records).
func BenchmarkPlanSmallJobOnLargeCache(b *testing.B) {
	l := newLayoutB(b)
	ids, m := benchSeqs(100000)
	h, _ := methods.Default().Get("H")
	steps, err := l.ProfileSteps(h.Profile, methods.Kcat)
	if err != nil {
		b.Fatal(err)
	}
	sum := sha256.Sum256([]byte{0})
	for _, s := range steps {
		for _, f := range s.Families {
			admitFamily(b, l, f)
			commits := make([]Commit, 0, len(ids))
			for k, sid := range ids {
				c := Commit{SeqID: sid, Suffix: f.Suffix(), Bytes: 1, SHA256: hex.EncodeToString(sum[:]), MtimeNs: int64(k) + 1, CtimeNs: int64(k) + 1, Ino: uint64(k) + 1}
				if k < 3 { // the job's files exist, recorded as written
					p, _ := l.Path(f, sid)
					if err := os.WriteFile(p, []byte{0}, 0o644); err != nil {
						b.Fatal(err)
					}
					st, err := StatFile(p)
					if err != nil {
						b.Fatal(err)
					}
					c.MtimeNs, c.CtimeNs, c.Ino = st.MtimeNs, st.CtimeNs, st.Ino
				}
				commits = append(commits, c)
			}
			if err := MergeManifest(l.FamilyDir(f), commits, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	req := PlanRequest{MethodKey: h.Key, Target: methods.Kcat, Profile: h.Profile, SeqIDs: ids[:3], SeqIDToSeq: m}
	var paths []string
	for _, s := range steps {
		for _, f := range s.Families {
			for _, sid := range ids[:3] {
				p, _ := l.Path(f, sid)
				paths = append(paths, p)
			}
		}
	}
	// A large cache's manifests are mostly quiet: let these be, so that
	// their records are kept (slotcache.go) whichever sub-benchmark runs
	// first or alone.
	time.Sleep(slotCacheQuiet + 100*time.Millisecond)
	b.Run("plan", func(b *testing.B) {
		for b.Loop() {
			p, err := l.BuildPlan(context.Background(), req)
			if err != nil || p.NeedComputation != 0 || p.CachedAlready != 3 {
				b.Fatalf("plan: %v %+v", err, p)
			}
		}
	})
	// Predict's check after the method read the files (recheckAfterRead).
	b.Run("changed-since-check", func(b *testing.B) {
		for b.Loop() {
			if ch := l.ChangedSinceCheck(paths); len(ch) != 0 {
				b.Fatalf("changed: %v", ch)
			}
		}
	})
}

// BenchmarkMergeSmallBatch merges one small step's batch (3 new files, as
// the GPU host and the synthetic writer do after every batch) into a
// family's manifest of n recorded files: what the one-file manifest costs a small job's step as the cache grows.
func BenchmarkMergeSmallBatch(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			dir := b.TempDir()
			ids, _ := benchSeqs(n + 3)
			sum := sha256.Sum256([]byte{0})
			commit := func(k int) Commit {
				return Commit{SeqID: ids[k], Suffix: ".npy", Bytes: 4224, Synthetic: true, SHA256: hex.EncodeToString(sum[:]),
					MtimeNs: int64(k) + 1, CtimeNs: int64(k) + 1, Ino: uint64(k) + 1}
			}
			all := make([]Commit, n)
			for k := range all {
				all[k] = commit(k)
			}
			if err := MergeManifest(dir, all, nil); err != nil {
				b.Fatal(err)
			}
			batch := []Commit{commit(n), commit(n + 1), commit(n + 2)}
			for b.Loop() {
				if err := MergeManifest(dir, batch, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
