package lease

import (
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
