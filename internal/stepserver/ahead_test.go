package stepserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// actLine is a batch line whose act waits for file (wait, waitcrash).
func actLine(n int, act, file string) []byte {
	return []byte(fmt.Sprintf(`{"batch": %d, "act": %q, "file": %q}`, n, act, file))
}

func send(t *testing.T, p *Pool, spec Spec, n int, line []byte) *Pending {
	t.Helper()
	w, err := p.Send(context.Background(), spec, n, line, nil)
	if err != nil {
		t.Fatalf("Send %d: %v", n, err)
	}
	return w
}

// TestSendAheadServerReadsNextBeforeAnswering: with Ahead 2 the server has
// batch n+1 before it answers batch n ("next" answers only once the
// following line has been read; one batch at a time would never answer),
// and every caller gets its own answer, in order.
func TestSendAheadServerReadsNextBeforeAnswering(t *testing.T) {
	p := newPool(t, Options{Ahead: 2})
	spec := fakeSpec("k")
	ctx, cancel := context.WithTimeout(context.Background(), gone)
	defer cancel()
	// A batch holds its place until its Wait returns: each is waited for
	// at once, as the GPU host's runner does.
	answers := make([]chan Answer, 5)
	for i := 1; i <= 5; i++ {
		act := "next"
		if i == 5 {
			act = "done"
		}
		w := send(t, p, spec, i, batchLine(i, act))
		answers[i-1] = make(chan Answer, 1)
		go func() {
			a, err := w.Wait(ctx)
			if err != nil {
				t.Errorf("batch %d: %v", i, err)
			}
			answers[i-1] <- a
		}()
	}
	for i, c := range answers {
		if a := <-c; a.Batch != i+1 || a.Status != StatusDone {
			t.Fatalf("batch %d: %+v", i+1, a)
		}
	}
	eventually(t, gone, "the server idle after five batches", func() bool {
		s := statusOf(p, "k")
		return s.State == StateReady && s.Batches == 5
	})
}

// TestSendAheadOneAtATimeNeverOverlaps: with Ahead 1 a second batch is not
// sent before the first is answered (the "next" batch waits for a line
// that cannot come, until its context ends).
func TestSendAheadOneAtATimeNeverOverlaps(t *testing.T) {
	p := newPool(t, Options{Ahead: 1})
	spec := fakeSpec("k")
	w := send(t, p, spec, 1, batchLine(1, "next"))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := p.Send(ctx, spec, 2, batchLine(2, "done"), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Send with Ahead 1 = %v, want it to wait for the first answer", err)
	}
	if _, err := w.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v", err)
	}
}

// TestSendAheadWindowIsBounded: Send waits while Ahead batches are in
// flight and returns once one is answered.
func TestSendAheadWindowIsBounded(t *testing.T) {
	p := newPool(t, Options{Ahead: 2})
	spec := fakeSpec("k")
	release := filepath.Join(t.TempDir(), "release")
	w1 := send(t, p, spec, 1, actLine(1, "wait", release))
	w2 := send(t, p, spec, 2, batchLine(2, "done"))
	third := make(chan *Pending, 1)
	go func() {
		w, err := p.Send(context.Background(), spec, 3, batchLine(3, "done"), nil)
		if err != nil {
			t.Error(err)
		}
		third <- w
	}()
	select {
	case <-third:
		t.Fatal("a third batch was sent while two were in flight")
	case <-time.After(300 * time.Millisecond):
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if a, err := w1.Wait(context.Background()); err != nil || a.Batch != 1 {
		t.Fatalf("batch 1: %+v %v", a, err)
	}
	w3 := <-third
	for i, w := range []*Pending{w2, w3} {
		if a, err := w.Wait(context.Background()); err != nil || a.Batch != i+2 {
			t.Fatalf("batch %d: %+v %v", i+2, a, err)
		}
	}
}

// TestSendAheadCrashFailsEveryBatchInFlight: a server that dies with three
// batches in flight fails all three with a *ServerError marked Interrupted
// (which of them killed it cannot be told); the next batch starts a new
// server, and a crash with one batch in flight is not Interrupted.
func TestSendAheadCrashFailsEveryBatchInFlight(t *testing.T) {
	p := newPool(t, Options{Ahead: 3})
	spec := fakeSpec("k")
	release := filepath.Join(t.TempDir(), "release")
	ws := []*Pending{send(t, p, spec, 1, actLine(1, "waitcrash", release)), send(t, p, spec, 2, batchLine(2, "done")), send(t, p, spec, 3, batchLine(3, "done"))}
	pid := statusOf(p, "k").PID
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		_, err := w.Wait(context.Background())
		var se *ServerError
		if !errors.As(err, &se) || !se.Interrupted || !strings.Contains(se.Reason, "3 batches were in flight") {
			t.Fatalf("batch %d: %v, want an interrupted ServerError", i+1, err)
		}
	}
	if a, _, err := do(t, p, spec, 4, "done"); err != nil || a.Status != StatusDone {
		t.Fatalf("after the crash: %+v %v", a, err)
	}
	if s := statusOf(p, "k"); s.PID == pid || s.PID == 0 {
		t.Fatalf("status %+v: want a new server", s)
	}
	_, _, err := do(t, p, spec, 5, "crash")
	var se *ServerError
	if !errors.As(err, &se) || se.Interrupted {
		t.Fatalf("lone crash: %v, want a ServerError not Interrupted", err)
	}
}

// TestSendAheadCancelInterruptsOtherCallers: one caller's cancellation
// still stops the server (its state is unknown); another caller's batch in
// flight behind it fails as Interrupted, naming the cancelled batch, and a
// new server takes the next batch.
func TestSendAheadCancelInterruptsOtherCallers(t *testing.T) {
	p := newPool(t, Options{Ahead: 2})
	spec := fakeSpec("k")
	ctx, cancel := context.WithCancel(context.Background())
	w1, err := p.Send(ctx, spec, 1, batchLine(1, "hang"), nil)
	if err != nil {
		t.Fatal(err)
	}
	w2 := send(t, p, spec, 2, batchLine(2, "done"))
	var wg sync.WaitGroup
	var err2 error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err2 = w2.Wait(context.Background())
	}()
	cancel()
	if _, err := w1.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled batch: %v", err)
	}
	wg.Wait()
	var se *ServerError
	if !errors.As(err2, &se) || !se.Interrupted || !strings.Contains(se.Reason, "batch 1 was cancelled") {
		t.Fatalf("the other caller's batch: %v, want Interrupted naming batch 1", err2)
	}
	if a, _, err := do(t, p, spec, 3, "done"); err != nil || a.Status != StatusDone {
		t.Fatalf("after the cancellation: %+v %v", a, err)
	}
}

// TestSendAheadOutputGoesToTheOldestBatch: what the server writes while
// batches are in flight goes to the log of the oldest one (whose answer
// comes next), never to a batch already answered.
func TestSendAheadOutputGoesToTheOldestBatch(t *testing.T) {
	p := newPool(t, Options{Ahead: 2})
	spec := fakeSpec("k")
	release := filepath.Join(t.TempDir(), "release")
	var g1, g2 logLines
	w1, err := p.Send(context.Background(), spec, 1, batchLine(1, "next"), g1.add)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := p.Send(context.Background(), spec, 2, actLine(2, "oom", release), g2.add)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w1.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := g1.text()
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if a, err := w2.Wait(context.Background()); err != nil || a.Status != StatusOOM {
		t.Fatalf("batch 2: %+v %v", a, err)
	}
	// Each answer line is logged before it is matched, so it reaches its own
	// batch's log; nothing reaches batch 1's after its answer. (Stderr has a
	// pipe of its own: a line written just before an answer may be read
	// after it, and then goes to the next batch in flight, or the pool's
	// log.)
	one, two := `[stdout] {"batch":1,"status":"done"}`, `[stdout] {"batch":2,"status":"oom"}`
	if l := g1.text(); l != first || !strings.Contains(l, one) || strings.Contains(l, two) {
		t.Errorf("batch 1's log, changed after its answer or without its answer:\n%s", l)
	}
	if l := g2.text(); !strings.Contains(l, two) || strings.Contains(l, one) {
		t.Errorf("batch 2's log:\n%s", l)
	}
}
