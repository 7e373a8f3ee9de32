package embedjob

import (
	"context"
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/lease"
)

// Concurrent jobs that need the same missing artefact compute it once: before
// computing a sequence of a step, a worker takes the sequence's lease on
// shared storage (internal/lease); a sequence leased by someone else is
// waited for until its files appear, or computed here if its holder dies
// (its lease goes stale) or gives up without writing it.

// Lease timings: a holder refreshes every leaseRefresh; a lease not refreshed
// for leaseTTL belongs to a dead worker. The TTL is a few refreshes long so a
// busy or briefly stalled host keeps its leases.
const (
	leaseTTL     = 30 * time.Second
	leaseRefresh = 5 * time.Second
	// awaitPoll is how often a waiting step looks for the other worker's files.
	awaitPoll = 200 * time.Millisecond
)

func leaseKey(step, seqID string) string { return step + "." + seqID }

// heldLeases is the set of leases one step run holds, refreshed in the
// background until released.
type heldLeases struct {
	l    *lease.Leases
	mu   sync.Mutex
	keys []string
	stop chan struct{}
	done chan struct{}
}

func newHeldLeases(l *lease.Leases) *heldLeases {
	h := &heldLeases{l: l, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		t := time.NewTicker(leaseRefresh)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				h.mu.Lock()
				keys := append([]string(nil), h.keys...)
				h.mu.Unlock()
				h.l.Refresh(keys)
			}
		}
	}()
	return h
}

// tryTake takes the lease of key and remembers it.
func (h *heldLeases) tryTake(key string) (bool, error) {
	ok, err := h.l.TryAcquire(key)
	if ok {
		h.mu.Lock()
		h.keys = append(h.keys, key)
		h.mu.Unlock()
	}
	return ok, err
}

// release stops refreshing and gives every lease up.
func (h *heldLeases) release() {
	close(h.stop)
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	h.l.Release(h.keys)
}

// claim splits todo into the sequences this run computes (their leases
// taken) and those another worker is computing.
func (h *heldLeases) claim(step string, todo []SeqItem) (mine, others []SeqItem, err error) {
	for _, it := range todo {
		ok, err := h.tryTake(leaseKey(step, it.SeqID))
		if err != nil {
			return nil, nil, err
		}
		if ok {
			mine = append(mine, it)
		} else {
			others = append(others, it)
		}
	}
	return mine, others, nil
}

// await waits for the sequences other workers compute. A sequence whose files
// all appear counts as existing (found, called per file); one whose lease is
// no longer held without its files is taken over and computed with compute.
//
// It waits in a running step activity (holding its slot) for another
// running step run: that run took its leases inside its own activity, holds
// its own slot and waits for nothing this one holds, so the wait ends when
// it writes the files, or 30 s after it dies (its lease goes stale and is
// taken over).
func (h *heldLeases) await(ctx context.Context, step string, waiting []SeqItem, found func(n int), compute func([]SeqItem) error) error {
	for len(waiting) > 0 {
		var still, takeover []SeqItem
		for _, it := range waiting {
			miss := MissingOutputs(it.Outputs)
			if len(miss) == 0 {
				found(len(it.MissingOutputs))
				continue
			}
			key := leaseKey(step, it.SeqID)
			if !h.l.Held(key) {
				ok, err := h.tryTake(key)
				if err != nil {
					return err
				}
				if ok {
					it.MissingOutputs = miss
					takeover = append(takeover, it)
					continue
				}
			}
			still = append(still, it)
		}
		if len(takeover) > 0 {
			if err := compute(takeover); err != nil {
				return err
			}
		}
		waiting = still
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(awaitPoll):
		}
	}
	return nil
}
