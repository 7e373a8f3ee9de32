package embedding

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/provenance"
)

// presenceFixtureFiles is the size of the family folder that
// BenchmarkPlanPresence300k plans against: a cache that has embedded
// 300,000 sequences with one model, the size at which listing a folder on
// sshfs or NFS took minutes.
const presenceFixtureFiles = 300_000

// presenceBenchEnv runs BenchmarkPlanPresence300k under any -bench pattern
// (`make bench`); without it the benchmark runs only when -bench names it,
// so that `-bench .` on a small machine does not write 300,000 files.
const presenceBenchEnv = "KINFLOW_BENCH_PRESENCE"

// presenceFixtureEnv names a folder that keeps the fixture between runs
// (built there once, reused while its marker file is there); without it
// the fixture lives in a temp folder removed when the test binary exits.
const presenceFixtureEnv = "KINFLOW_BENCH_PRESENCE_DIR"

// presenceFixtureMarker is written last into a kept fixture's folder.
const presenceFixtureMarker = ".presence-fixture-complete"

// afterTests are run by TestMain once every test and benchmark has run.
var afterTests []func()

// presenceFixture is the one family folder of presenceFixtureFiles files,
// built once per test binary.
type presenceFixture struct {
	l   *Layout
	f   Family
	ids []string // the cached ids, in write order
	err error
}

var (
	presenceOnce sync.Once
	presenceFix  presenceFixture
)

// presenceSeq is the sequence of fixture id k (cached or not). Short
// sequences: only the ids matter to presence.
func presenceSeq(k int) string {
	const alphabet = "ACDEFGHIKLMNPQRSTVWY"
	var b strings.Builder
	b.WriteString("MKT")
	for x := k + 1; x > 0; x /= 20 {
		b.WriteByte(alphabet[x%20])
	}
	return b.String()
}

// presenceBenchSelected reports whether the 300,000-file benchmark may run.
func presenceBenchSelected() bool {
	if os.Getenv(presenceBenchEnv) != "" {
		return true
	}
	f := flag.Lookup("test.bench")
	return f != nil && strings.Contains(f.Value.String(), "Presence300k")
}

// buildPresenceFixture writes presenceFixtureFiles files of method H's
// family, each through the cache write protocol of kinflow's writers
// (writeArtefactTemp, a manifest merge with the file's size, times, inode
// and SHA-256, the rename, then RecordRenamed for the inode change time the
// rename moved): the state a real writer leaves, so that a verified plan
// trusts every present file by its stat alone. The family is admitted as a
// real model's. The vectors are npy files of 8 float32 (168 bytes, one
// block each) instead of the model's 1,280: presence and the integrity
// check's fast path read no file's contents. The temp files are not
// fsynced (the fixture need not survive a crash), which is the only step
// of the protocol left out.
func buildPresenceFixture(root string) presenceFixture {
	var fx presenceFixture
	l, err := NewLayout(filepath.Join(root, "media"), "", "", "")
	if err != nil {
		return presenceFixture{err: err}
	}
	f, ok := FamilyByName(FamilyESM2LayerLastMean)
	if !ok {
		return presenceFixture{err: fmt.Errorf("no family %s", FamilyESM2LayerLastMean)}
	}
	fx.l, fx.f = l, f
	fx.ids = make([]string, presenceFixtureFiles)
	for k := range fx.ids {
		fx.ids[k] = BaseSeqID(presenceSeq(k))
	}
	dir := l.FamilyDir(f)
	if _, err := os.Stat(filepath.Join(dir, presenceFixtureMarker)); err == nil {
		return fx
	}
	if err := ensureDir(dir); err != nil {
		return presenceFixture{err: err}
	}
	fp := provenance.Fingerprint{Model: f.Model, Weights: map[string]string{"esm2_t33_650M_UR50D.pt": "00"}}
	if _, err := provenance.Admit(dir, f.Name, fp); err != nil {
		return presenceFixture{err: err}
	}
	data, err := EncodeNPY(Tensor{Shape: []int{8}, Data: []float32{0.5, -0.25, 1, 0, 0.125, -1, 0.75, 2}})
	if err != nil {
		return presenceFixture{err: err}
	}
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	// Chunks as a batch writer commits them: temp files, their records,
	// the renames; each merge rewrites the whole manifest, so few and
	// large chunks.
	const chunk = 25_000
	var renamed []Commit
	for start := 0; start < len(fx.ids); start += chunk {
		ids := fx.ids[start:min(start+chunk, len(fx.ids))]
		temps := make([]fsutil.Temp, len(ids))
		commits := make([]Commit, len(ids))
		for i, sid := range ids {
			t, err := writeArtefactTemp(dir, sid, f.Suffix(), data, false)
			if err != nil {
				return presenceFixture{err: err}
			}
			st, err := StatFile(t.Path)
			if err != nil {
				return presenceFixture{err: err}
			}
			temps[i] = t
			commits[i] = Commit{SeqID: sid, Suffix: f.Suffix(), Bytes: int64(len(data)), SHA256: hexSum,
				MtimeNs: st.MtimeNs, CtimeNs: st.CtimeNs, Ino: st.Ino}
		}
		if err := MergeManifest(dir, commits, nil); err != nil {
			return presenceFixture{err: err}
		}
		for _, t := range temps {
			if err := t.Commit(); err != nil {
				return presenceFixture{err: err}
			}
		}
		renamed = append(renamed, commits...)
	}
	if err := RecordRenamed(dir, renamed); err != nil {
		return presenceFixture{err: err}
	}
	if err := os.WriteFile(filepath.Join(dir, presenceFixtureMarker), nil, 0o644); err != nil {
		return presenceFixture{err: err}
	}
	return fx
}

// getPresenceFixture builds the fixture once per test binary.
func getPresenceFixture(b *testing.B) *presenceFixture {
	b.Helper()
	presenceOnce.Do(func() {
		root := os.Getenv(presenceFixtureEnv)
		if root == "" {
			tmp, err := os.MkdirTemp("", "kinflow-presence-")
			if err != nil {
				presenceFix.err = err
				return
			}
			root = tmp
			afterTests = append(afterTests, func() { _ = os.RemoveAll(tmp) })
		}
		t0 := time.Now()
		presenceFix = buildPresenceFixture(root)
		if presenceFix.err == nil {
			fmt.Fprintf(os.Stderr, "presence fixture: %d files in %s (%.1f s)\n", presenceFixtureFiles,
				presenceFix.l.FamilyDir(presenceFix.f), time.Since(t0).Seconds())
		}
	})
	if presenceFix.err != nil {
		b.Fatal(presenceFix.err)
	}
	return &presenceFix
}

// BenchmarkPlanPresence300k plans a method H job of n ids (half of them
// among the folder's 300,000 cached files, spread over it, half not
// cached) and compares it with a bare loop of os.Stat over the same n
// paths, interleaved in one loop. It reports nanoseconds per requested id
// of the plan without the integrity check (`kinflow plan`), of the plan
// with it (what a job's BuildPlan runs: presence, then every present
// file's stat against its record), of the stat loop, and the two ratios.
// A presence check that lists the folder costs the same for 1,000 ids as
// for 10,000; one that stats only the requested ids grows with n.
//
// Runs only when -bench names it (or with KINFLOW_BENCH_PRESENCE set):
// the fixture takes about 1.3 GB of disk (one block per file and the
// manifest), a minute or two to write and about as long to remove.
func BenchmarkPlanPresence300k(b *testing.B) {
	if !presenceBenchSelected() {
		b.Skip("writes 300,000 files: name it in -bench, or set " + presenceBenchEnv)
	}
	fx := getPresenceFixture(b)
	h, ok := methods.Default().Get("H")
	if !ok || h.Profile != methods.ProfileMethodHESM2LastMean {
		b.Fatalf("method H: profile %q", h.Profile)
	}
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("ids=%d", n), func(b *testing.B) {
			ids := make([]string, 0, n)
			seqs := make(map[string]string, n)
			stride := len(fx.ids) / (n / 2)
			for k := 0; k < n/2; k++ {
				sid := fx.ids[k*stride]
				ids = append(ids, sid)
				seqs[sid] = presenceSeq(k * stride)
			}
			for k := 0; k < n/2; k++ {
				seq := presenceSeq(presenceFixtureFiles + k)
				ids = append(ids, BaseSeqID(seq))
				seqs[BaseSeqID(seq)] = seq
			}
			paths := make([]string, len(ids))
			for i, sid := range ids {
				paths[i], _ = fx.l.Path(fx.f, sid)
			}
			// RealOnly: the checked path of a real engine's plan.
			req := PlanRequest{MethodKey: h.Key, Target: methods.Kcat, Profile: h.Profile, SeqIDs: ids, SeqIDToSeq: seqs, RealOnly: true}
			verified := req
			verified.Verify = true
			ctx := context.Background()
			plan := func(r PlanRequest) {
				p, err := fx.l.BuildPlan(ctx, r)
				if err != nil || p.CachedAlready != n/2 || p.NeedComputation != n-n/2 {
					b.Fatalf("plan: %v (cached %d, need %d)", err, p.CachedAlready, p.NeedComputation)
				}
				if r.Verify && (p.Integrity == nil || p.Integrity.Checked != n/2 || p.Integrity.Hashed != 0 || len(p.Integrity.Bad) != 0) {
					b.Fatalf("verified plan: %+v", p.Integrity)
				}
			}
			statLoop := func() {
				found := 0
				for _, p := range paths {
					if _, err := os.Stat(p); err == nil {
						found++
					}
				}
				if found != n/2 {
					b.Fatalf("stat loop: %d found, want %d", found, n/2)
				}
			}
			// One untimed round, so that each side finds the same kernel
			// caches (dentries, negative dentries, the manifest's pages).
			plan(req)
			plan(verified)
			statLoop()
			var tp, tv, ts time.Duration
			rounds := 0
			for b.Loop() {
				rounds++
				t0 := time.Now()
				plan(req)
				t1 := time.Now()
				plan(verified)
				t2 := time.Now()
				statLoop()
				tp += t1.Sub(t0)
				tv += t2.Sub(t1)
				ts += time.Since(t2)
			}
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(rounds) / float64(n) }
			b.ReportMetric(per(tp), "plan-ns/id")
			b.ReportMetric(per(tv), "planverify-ns/id")
			b.ReportMetric(per(ts), "stat-ns/id")
			b.ReportMetric(float64(tp)/float64(ts), "plan/stat")
			b.ReportMetric(float64(tv)/float64(ts), "planverify/stat")
		})
	}
}
