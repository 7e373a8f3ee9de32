package lease

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

func TestConcurrentAcquireHasOneWinner(t *testing.T) {
	dir := t.TempDir()
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := &Leases{Dir: dir, TTL: time.Minute}
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
// releasing (issue 14: 719 after one test run) are removed by age and, on
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
