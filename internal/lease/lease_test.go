package lease

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestOneHolderAtATime(t *testing.T) {
	dir := t.TempDir()
	a := &Leases{Dir: dir, TTL: time.Minute, Owner: "a"}
	b := &Leases{Dir: dir, TTL: time.Minute, Owner: "b"}
	if ok, err := a.TryAcquire("prot_t5_mean.44dc0ead1b00"); !ok || err != nil {
		t.Fatalf("a: %v %v", ok, err)
	}
	if ok, _ := b.TryAcquire("prot_t5_mean.44dc0ead1b00"); ok {
		t.Fatal("b acquired a held lease")
	}
	if !b.Held("prot_t5_mean.44dc0ead1b00") {
		t.Fatal("b does not see a's lease")
	}
	a.Release([]string{"prot_t5_mean.44dc0ead1b00"})
	if ok, _ := b.TryAcquire("prot_t5_mean.44dc0ead1b00"); !ok {
		t.Fatal("b could not acquire a released lease")
	}
}

func TestStaleLeaseIsTakenOverAndRefreshKeepsItAlive(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	clock := func() time.Time { return now }
	a := &Leases{Dir: dir, TTL: 10 * time.Second, Owner: "a", Now: clock}
	b := &Leases{Dir: dir, TTL: 10 * time.Second, Owner: "b", Now: clock}
	if ok, _ := a.TryAcquire("k"); !ok {
		t.Fatal("a")
	}
	now = now.Add(8 * time.Second)
	a.Refresh([]string{"k"})
	now = now.Add(8 * time.Second) // 16 s after creation, 8 s after refresh
	if ok, _ := b.TryAcquire("k"); ok {
		t.Fatal("b took over a refreshed lease")
	}
	now = now.Add(5 * time.Second) // 13 s after the refresh: a died
	if ok, _ := b.TryAcquire("k"); !ok {
		t.Fatal("b could not take over a stale lease")
	}
}

// TestConcurrentAcquireHasOneWinner: holders racing for one key, with
// files of their own or each with a spare (a released lease of its own):
// one wins.
func TestConcurrentAcquireHasOneWinner(t *testing.T) {
	for _, withSpare := range []bool{false, true} {
		t.Run(fmt.Sprintf("spare=%v", withSpare), func(t *testing.T) {
			dir := t.TempDir()
			var wins atomic.Int32
			var wg sync.WaitGroup
			for i := 0; i < 32; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := &Leases{Dir: dir, TTL: time.Minute}
					if withSpare {
						own := fmt.Sprintf("own%d", i)
						if ok, err := l.TryAcquire(own); !ok || err != nil {
							t.Error(own, ok, err)
							return
						}
						l.Release([]string{own})
					}
					if ok, err := l.TryAcquire("same"); err != nil {
						t.Error(err)
					} else if ok {
						wins.Add(1)
					}
				}()
			}
			wg.Wait()
			if wins.Load() != 1 {
				t.Fatalf("%d winners, want 1", wins.Load())
			}
		})
	}
}

func TestKeysCannotEscapeTheFolder(t *testing.T) {
	l := &Leases{Dir: t.TempDir(), TTL: time.Minute}
	for _, k := range []string{"../x", "a/b", ".hidden", "", "x\x00"} {
		if _, err := l.TryAcquire(k); err == nil {
			t.Errorf("key %q accepted", k)
		}
	}
}

// TestSweepRemovesDeadLeases: lease files left by holders killed without
// releasing (719 of them were once left after one test run) are removed by age and, on
// this host, by dead owner; a live holder's lease stays.
func TestSweepRemovesDeadLeases(t *testing.T) {
	dir := t.TempDir()
	host, _ := os.Hostname()
	now := time.Now()
	clock := func() time.Time { return now }
	live := &Leases{Dir: dir, TTL: 10 * time.Second, Owner: fmt.Sprintf("%s/%d", host, os.Getpid()), Now: clock}
	if ok, err := live.TryAcquire("live"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	// A dead process of this host: a child that has exited.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := &Leases{Dir: dir, TTL: 10 * time.Second, Owner: fmt.Sprintf("%s/%d", host, cmd.Process.Pid), Now: clock}
	if ok, _ := dead.TryAcquire("dead-owner"); !ok {
		t.Fatal("dead-owner")
	}
	other := &Leases{Dir: dir, TTL: 10 * time.Second, Owner: "elsewhere/1", Now: clock}
	for _, k := range []string{"old", "young-elsewhere"} {
		if ok, _ := other.TryAcquire(k); !ok {
			t.Fatal(k)
		}
	}
	past := now.Add(-time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "old.lease"), past, past); err != nil {
		t.Fatal(err)
	}
	// (The other holders' first TryAcquire already swept once: the dead
	// owner's lease may be gone before this call.)
	if n, err := live.Sweep(); err != nil || n < 1 {
		t.Fatalf("removed %d: %v", n, err)
	}
	for k, want := range map[string]bool{"live": true, "dead-owner": false, "old": false, "young-elsewhere": true} {
		if _, err := os.Stat(filepath.Join(dir, k+".lease")); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", k, err == nil, want)
		}
	}
	// TryAcquire sweeps by itself, at most once per TTL.
	now = now.Add(time.Minute)
	if ok, _ := live.TryAcquire("another"); !ok {
		t.Fatal("another")
	}
	if _, err := os.Stat(filepath.Join(dir, "young-elsewhere.lease")); err == nil {
		t.Error("TryAcquire did not sweep a lease unrefreshed for 6 TTLs")
	}
}

// spares lists the spare files in dir.
func spares(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if strings.HasPrefix(e.Name(), spareMark) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// TestReleasedFileBecomesTheNextLease: a released lease's file is kept as
// a spare and is the next lease's file (the same inode, stamped anew):
// leasing allocates and frees no inode once a holder has released one.
func TestReleasedFileBecomesTheNextLease(t *testing.T) {
	dir := t.TempDir()
	a := &Leases{Dir: dir, TTL: time.Minute, Owner: "a"}
	if ok, err := a.TryAcquire("k1"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	first, err := os.Stat(filepath.Join(dir, "k1.lease"))
	if err != nil {
		t.Fatal(err)
	}
	a.Release([]string{"k1"})
	if _, err := os.Stat(filepath.Join(dir, "k1.lease")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("k1 still leased: %v", err)
	}
	sp := spares(t, dir)
	if len(sp) != 1 {
		t.Fatalf("spares %v, want one", sp)
	}
	if a.Held("k1") {
		t.Fatal("a released lease is held")
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(sp[0], old, old); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.TryAcquire("k2"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	p := filepath.Join(dir, "k2.lease")
	next, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(first, next) {
		t.Error("k2's lease is a new file, not the spare")
	}
	if time.Since(next.ModTime()) > time.Minute {
		t.Errorf("k2's lease keeps the spare's old time %v", next.ModTime())
	}
	if !a.Held("k2") {
		t.Error("k2 not held")
	}
	if data, _ := os.ReadFile(p); !strings.HasPrefix(string(data), "a ") {
		t.Errorf("k2's lease reads %q", data)
	}
	if sp := spares(t, dir); len(sp) != 0 {
		t.Errorf("spares left %v", sp)
	}
}

// TestSpareNeverTakesAHeldKey: a holder's spare cannot become another
// holder's lease (the link fails as O_EXCL does), and stays a spare.
func TestSpareNeverTakesAHeldKey(t *testing.T) {
	dir := t.TempDir()
	a := &Leases{Dir: dir, TTL: time.Minute, Owner: "a"}
	b := &Leases{Dir: dir, TTL: time.Minute, Owner: "b"}
	if ok, _ := a.TryAcquire("mine"); !ok {
		t.Fatal("mine")
	}
	a.Release([]string{"mine"})
	if ok, _ := b.TryAcquire("k"); !ok {
		t.Fatal("b")
	}
	if ok, _ := a.TryAcquire("k"); ok {
		t.Fatal("a took b's lease with its spare")
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "k.lease")); !strings.HasPrefix(string(data), "b ") {
		t.Errorf("k's lease reads %q, want b's", data)
	}
	if sp := spares(t, dir); len(sp) != 1 {
		t.Errorf("spares %v, want a's one", sp)
	}
}

// TestSweptSpareIsNotMissed: a spare unused for sweepAfter TTLs is swept
// (by anyone); its owner then makes its next lease anew.
func TestSweptSpareIsNotMissed(t *testing.T) {
	dir := t.TempDir()
	a := &Leases{Dir: dir, TTL: 10 * time.Second, Owner: "a"}
	if ok, _ := a.TryAcquire("k1"); !ok {
		t.Fatal("k1")
	}
	a.Release([]string{"k1"})
	sp := spares(t, dir)
	if len(sp) != 1 {
		t.Fatalf("spares %v", sp)
	}
	young := &Leases{Dir: dir, TTL: 10 * time.Second}
	if n, _ := young.Sweep(); n != 0 {
		t.Fatalf("a young spare was swept (%d removed)", n)
	}
	past := time.Now().Add(-time.Minute)
	if err := os.Chtimes(sp[0], past, past); err != nil {
		t.Fatal(err)
	}
	if n, err := young.Sweep(); n != 1 || err != nil {
		t.Fatalf("removed %d: %v", n, err)
	}
	if ok, err := a.TryAcquire("k2"); !ok || err != nil {
		t.Fatalf("k2 after the sweep: %v %v", ok, err)
	}
	if !a.Held("k2") {
		t.Fatal("k2 not held")
	}
}
