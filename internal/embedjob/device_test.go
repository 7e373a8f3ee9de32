package embedjob

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// deviceRecorder is a batch runner that records the batches it ran and can
// hold the first one until released.
type deviceRecorder struct {
	mu      sync.Mutex
	batches [][]string
	hold    chan struct{}
	started chan struct{}
}

func (r *deviceRecorder) run(ctx context.Context, b BatchJob) error {
	r.mu.Lock()
	var ids []string
	for _, it := range b.Items {
		ids = append(ids, it.SeqID)
	}
	r.batches = append(r.batches, ids)
	first := len(r.batches) == 1
	r.mu.Unlock()
	if first && r.hold != nil {
		close(r.started)
		select {
		case <-r.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func devJob(step, id string, n int) BatchJob {
	return BatchJob{JobID: "job-" + id, StepKey: step, Index: 1, Items: []SeqItem{{SeqID: id, Sequence: string(make([]byte, n))}}}
}

// waitQueued waits until n batches wait on d.
func waitQueued(t *testing.T, d *Device, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d.mu.Lock()
		q := 0
		for _, l := range d.waiting {
			q += len(l)
		}
		d.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d batches waiting, want %d", q, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDeviceJoinsWaitingBatchesOfOneStep(t *testing.T) {
	d := NewDevice(1)
	rec := &deviceRecorder{hold: make(chan struct{}), started: make(chan struct{})}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 11)
	wg.Add(1)
	go func() { defer wg.Done(); errs[0] = d.Run(ctx, devJob("prot_t5_mean", "s00", 100), 1<<20, 0, rec.run) }()
	<-rec.started
	// Ten small jobs' batches arrive while the device is busy; one of
	// another step too.
	for i := 1; i <= 9; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = d.Run(ctx, devJob("prot_t5_mean", fmt.Sprintf("s%02d", i), 100), 1<<20, 0, rec.run)
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); errs[10] = d.Run(ctx, devJob("esm2_mean", "e10", 100), 1<<20, 0, rec.run) }()
	waitQueued(t, d, 10)
	close(rec.hold)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	// The first batch alone; then the nine of prot_t5_mean as one and the
	// other step's on its own, in either order.
	if len(rec.batches) != 3 {
		t.Fatalf("device ran %d batches, want 3: %v", len(rec.batches), rec.batches)
	}
	var sizes []int
	for _, b := range rec.batches[1:] {
		sizes = append(sizes, len(b))
	}
	slices.Sort(sizes)
	if !slices.Equal(sizes, []int{1, 9}) {
		t.Fatalf("joined batches %v, want one of 9 and one of 1", rec.batches)
	}
}

func TestDeviceJoinRespectsBudgetAndCap(t *testing.T) {
	for _, tc := range []struct {
		name            string
		budget, maxSeqs int
		want            []int
	}{
		// Each item costs about 100 tokens (with its special tokens): a budget
		// of 320 holds three.
		{"budget", 320, 0, []int{3, 3, 2}},
		{"cap", 1 << 20, 4, []int{4, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDevice(1)
			rec := &deviceRecorder{hold: make(chan struct{}), started: make(chan struct{})}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = d.Run(context.Background(), devJob("s", "first", 100), tc.budget, tc.maxSeqs, rec.run)
			}()
			<-rec.started
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := d.Run(context.Background(), devJob("s", fmt.Sprint(i), 100), tc.budget, tc.maxSeqs, rec.run); err != nil {
						t.Error(err)
					}
				}()
				// Arrival order is the join order.
				waitQueued(t, d, i+1)
			}
			close(rec.hold)
			wg.Wait()
			var sizes []int
			for _, b := range rec.batches[1:] {
				sizes = append(sizes, len(b))
			}
			if !slices.Equal(sizes, tc.want) {
				t.Fatalf("batch sizes %v, want %v (%v)", sizes, tc.want, rec.batches)
			}
		})
	}
}

// A batch that joined another whose caller was cancelled mid-batch runs
// again on its own: one job's cancellation never fails another's batch.
func TestDeviceRiderRunsAgainWhenLeaderIsCancelled(t *testing.T) {
	d := NewDevice(1)
	var mu sync.Mutex
	var runs [][]string
	blockFirst := make(chan struct{})
	busy := make(chan struct{})
	leaderIn := make(chan struct{})
	run := func(ctx context.Context, b BatchJob) error {
		mu.Lock()
		var ids []string
		for _, it := range b.Items {
			ids = append(ids, it.SeqID)
		}
		runs = append(runs, ids)
		n := len(runs)
		mu.Unlock()
		switch n {
		case 1:
			close(busy)
			<-blockFirst
		case 2:
			close(leaderIn)
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = d.Run(context.Background(), devJob("s", "a", 10), 1<<20, 0, run) }()
	<-busy
	lctx, cancel := context.WithCancel(context.Background())
	var leaderErr, riderErr error
	wg.Add(2)
	go func() { defer wg.Done(); leaderErr = d.Run(lctx, devJob("s", "leader", 10), 1<<20, 0, run) }()
	waitQueued(t, d, 1)
	go func() {
		defer wg.Done()
		riderErr = d.Run(context.Background(), devJob("s", "rider", 10), 1<<20, 0, run)
	}()
	waitQueued(t, d, 2)
	close(blockFirst)
	<-leaderIn
	cancel()
	wg.Wait()
	if leaderErr == nil {
		t.Fatal("the cancelled leader's batch succeeded")
	}
	if riderErr != nil {
		t.Fatalf("the rider failed with its leader: %v", riderErr)
	}
	if len(runs) != 3 || !slices.Equal(runs[1], []string{"leader", "rider"}) || !slices.Equal(runs[2], []string{"rider"}) {
		t.Fatalf("runs %v: want a, leader+rider, rider", runs)
	}
}

func TestDeviceCancelledWhileWaitingLeavesTheLine(t *testing.T) {
	d := NewDevice(1)
	rec := &deviceRecorder{hold: make(chan struct{}), started: make(chan struct{})}
	go func() { _ = d.Run(context.Background(), devJob("s", "a", 10), 1<<20, 0, rec.run) }()
	<-rec.started
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx, devJob("s", "b", 10), 1<<20, 0, rec.run) }()
	waitQueued(t, d, 1)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a cancelled wait returned no error")
	}
	waitQueued(t, d, 0)
	close(rec.hold)
}

// fairOrder holds the device with one batch, queues the batches of jobs in
// order (each its own step, so none rides with another), releases the
// device and returns the order in which the queued batches ran.
func fairOrder(t *testing.T, jobs []BatchJob) []string {
	t.Helper()
	d := NewDevice(1)
	rec := &deviceRecorder{hold: make(chan struct{}), started: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := d.Run(context.Background(), devJob("hold", "h", 1), 1, 0, rec.run); err != nil {
			t.Error(err)
		}
	}()
	<-rec.started
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.Run(context.Background(), j, 1, 0, rec.run); err != nil {
				t.Error(err)
			}
		}()
		waitQueued(t, d, i+1)
	}
	close(rec.hold)
	wg.Wait()
	var order []string
	for _, b := range rec.batches[1:] {
		order = append(order, b[0])
	}
	return order
}

// TestDeviceSharesTurnsByKey: a key with six batches waiting does not hold
// another key's one behind them all: the other key's batch runs second,
// first come first served within a key.
func TestDeviceSharesTurnsByKey(t *testing.T) {
	var jobs []BatchJob
	for i := 1; i <= 6; i++ {
		j := devJob(fmt.Sprint("s", i), fmt.Sprint("A", i), 1)
		j.Share = Share{Key: "key-1", Weight: 1}
		jobs = append(jobs, j)
	}
	b := devJob("s7", "B1", 1)
	b.Share = Share{Key: "key-2", Weight: 1}
	jobs = append(jobs, b)
	got := fairOrder(t, jobs)
	want := []string{"A1", "B1", "A2", "A3", "A4", "A5", "A6"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// TestDeviceTurnsFollowWeights: with both keys' batches waiting, a key of
// weight 2 gets two turns for each of a weight-1 key's.
func TestDeviceTurnsFollowWeights(t *testing.T) {
	var jobs []BatchJob
	for i := 1; i <= 6; i++ {
		a := devJob(fmt.Sprint("a", i), fmt.Sprint("A", i), 1)
		a.Share = Share{Key: "key-1", Weight: 2}
		b := devJob(fmt.Sprint("b", i), fmt.Sprint("B", i), 1)
		b.Share = Share{Key: "key-2", Weight: 1}
		jobs = append(jobs, a, b)
	}
	got := fairOrder(t, jobs)
	as := 0
	for _, id := range got[:9] {
		if id[0] == 'A' {
			as++
		}
	}
	if as != 6 {
		t.Fatalf("the weight-2 key had %d of the first 9 turns, want 6 (order %v)", as, got)
	}
}
