package api

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
)

// TestSharingOf: a job shares the queues with other keys' unfinished work
// of its class or a class served before it, never its own key's and never
// work served after it.
func TestSharingOf(t *testing.T) {
	work := []store.KeyWork{
		{KeyID: 1, Status: store.JobPending, Priority: "normal", Jobs: 6, Rows: 900},
		{KeyID: 2, Status: store.JobProcessing, Priority: "normal", Jobs: 1, Rows: 150},
		{KeyID: 3, Status: store.JobPending, Priority: "bulk", Jobs: 2, Rows: 20000},
		{KeyID: 4, Status: store.JobProcessing, Priority: "interactive", Jobs: 3, Rows: 9},
		{KeyID: 5, Status: store.JobPending, Priority: "", Jobs: 1, Rows: 70},
	}
	got := sharingOf(&store.Job{KeyID: 2, Priority: "normal"}, work)
	if got.OtherKeys != 3 || got.OtherJobs != 10 || got.OtherRows != 979 || got.Class != "normal" {
		t.Fatalf("normal job of key 2: %+v", got)
	}
	if !strings.Contains(got.Text, "979 rows of 3 keys") {
		t.Fatalf("text %q", got.Text)
	}
	if got := sharingOf(&store.Job{KeyID: 4, Priority: "interactive"}, work); got.OtherKeys != 0 || got.OtherRows != 0 || !strings.Contains(got.Text, "no other key") {
		t.Fatalf("interactive job: %+v", got)
	}
	if got := sharingOf(&store.Job{KeyID: 3, Priority: "bulk"}, work); got.OtherKeys != 4 || got.OtherRows != 1129 {
		t.Fatalf("bulk job: %+v", got)
	}
}

// TestSharingBoardReadsOncePerInterval: many status reads share one read
// of the unfinished work per interval; a failed read keeps the last one.
func TestSharingBoardReadsOncePerInterval(t *testing.T) {
	var reads atomic.Int32
	fail := atomic.Bool{}
	b := newSharingBoard(func(context.Context) ([]store.KeyWork, error) {
		reads.Add(1)
		if fail.Load() {
			return nil, errors.New("database away")
		}
		return []store.KeyWork{{KeyID: 1, Rows: 5}}, nil
	})
	b.maxAge = 50 * time.Millisecond
	for range 100 {
		if w, ok := b.snapshot(context.Background()); !ok || len(w) != 1 {
			t.Fatalf("snapshot %v %v", w, ok)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads for 100 snapshots within the interval, want 1", n)
	}
	time.Sleep(60 * time.Millisecond)
	fail.Store(true)
	if w, ok := b.snapshot(context.Background()); !ok || len(w) != 1 {
		t.Fatalf("after a failed read: %v %v, want the last one kept", w, ok)
	}
	if n := reads.Load(); n != 2 {
		t.Fatalf("%d reads, want 2", n)
	}
}
