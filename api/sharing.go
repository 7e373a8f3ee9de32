package api

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/fairness"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/wire"
)

// sharingBoard answers unfinished jobs' `sharing` from one shared read of
// every key's unfinished work (store.UnfinishedWorkByKey: one grouped scan
// of the unfinished part of the status index), read again at most once per
// sharingMaxAge, by one caller at a time: a thousand waiting jobs cost one
// query per interval, not one each. A failed read answers nothing (the
// field is left out) and is tried again at the next interval.
type sharingBoard struct {
	read   func(ctx context.Context) ([]store.KeyWork, error)
	maxAge time.Duration

	mu      sync.Mutex
	work    []store.KeyWork
	at      time.Time
	have    bool
	loading bool
}

// sharingMaxAge bounds how old a status's `sharing` may be.
const sharingMaxAge = 2 * time.Second

func newSharingBoard(read func(context.Context) ([]store.KeyWork, error)) *sharingBoard {
	return &sharingBoard{read: read, maxAge: sharingMaxAge}
}

// snapshot is the latest read, reading again when it is older than maxAge
// and nobody else is reading (a caller that finds a read under way uses the
// previous one rather than wait).
func (b *sharingBoard) snapshot(ctx context.Context) ([]store.KeyWork, bool) {
	b.mu.Lock()
	if (b.have && time.Since(b.at) < b.maxAge) || b.loading {
		w, ok := b.work, b.have
		b.mu.Unlock()
		return w, ok
	}
	b.loading = true
	b.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	w, err := b.read(rctx)
	cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.loading = false
	b.at = time.Now()
	if err != nil {
		return b.work, b.have
	}
	b.work, b.have = w, true
	return w, true
}

// classRank orders classes as Temporal serves them; a job of no class
// (submitted before classes) started at the default priority, as normal.
func classRank(c string) int {
	switch fairness.Class(c) {
	case fairness.Interactive:
		return 0
	case fairness.Bulk:
		return 2
	}
	return 1
}

// sharingOf is job j's `sharing` from work: the other keys' unfinished work
// of j's class or a class served before it.
func sharingOf(j *store.Job, work []store.KeyWork) *wire.Sharing {
	out := &wire.Sharing{Class: j.Priority}
	keys := map[int64]bool{}
	rank := classRank(j.Priority)
	for _, w := range work {
		if w.KeyID == j.KeyID || classRank(w.Priority) > rank {
			continue
		}
		keys[w.KeyID] = true
		out.OtherJobs += w.Jobs
		out.OtherRows += w.Rows
	}
	out.OtherKeys = len(keys)
	class := j.Priority
	if class == "" {
		class = string(fairness.Normal)
	}
	if out.OtherKeys == 0 {
		out.Text = fmt.Sprintf("Served as %s work; no other key's work of its class or before it is waiting or running.", class)
	} else {
		out.Text = fmt.Sprintf("Served as %s work, taking turns with %s of %s of other keys' work (%s), served by key.",
			class, plural(int(out.OtherRows), "row", "rows"), plural(out.OtherKeys, "key", "keys"), plural(int(out.OtherJobs), "job", "jobs"))
	}
	return out
}
