package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kinflow/kinflow/internal/store"
)

// This file bounds the requests that wait for a change: event streams and
// held long polls. Each holds a connection, so a descriptor, for as long as
// it waits; without a bound one key held 11,000 streams and the process ran
// out of descriptors, failing other keys' jobs in `kinflow dev`. Every
// waiting request takes a place here, per key (KINFLOW_WAITS_PER_KEY) and in
// all (KINFLOW_WAITS_MAX); one more is answered 429 with Retry-After. A
// place also carries a context that ends when its key is revoked or its
// owner blocked, so that a revoked key's open streams end at once.

// fdReserve is what the process keeps of its open-file limit for everything
// but waiting requests: database connections, files, Temporal, other
// requests, and in `kinflow dev` the worker and the GPU host.
const fdReserve = 1024

// waitRetryAfter is the Retry-After of a wait refused for want of a place:
// places free as jobs change and streams end.
const waitRetryAfter = 5

// waitKeyCheckEvery is how often the keys of open waits are checked against
// the database (revoked or blocked by another process); a revocation in the
// process itself ends them at once.
const waitKeyCheckEvery = 5 * time.Second

// errKeyGone is the cause of a wait's context when its key was revoked or
// its owner blocked while it waited.
var errKeyGone = errors.New("API key revoked or blocked while waiting")

// errWaitsFull is a wait refused because the key or the process has no
// place left; its text is the user's message.
type errWaitsFull struct{ msg string }

func (e errWaitsFull) Error() string { return e.msg }

// waits is the registry of one Server's waiting requests.
type waits struct {
	perKey, max int
	mu          sync.Mutex
	total       int
	// byKey are the open waits by key hash (a revoked key's id comes back
	// with the next key of its address; its hash never does).
	byKey map[string]*keyWaits
	// checking is true while the key checker runs.
	checking bool
	// active answers which of the given key hashes are still usable (not
	// revoked, owner not blocked); nil: never checked.
	active func(ctx context.Context, hashes []string) (map[string]bool, error)
	log    *slog.Logger
	// checkEvery is waitKeyCheckEvery (shorter in tests).
	checkEvery time.Duration
	// refused counts refusals by bound ("key", "all"); nil: not counted.
	refused *prometheus.CounterVec
}

// keyWaits are one key's open waits.
type keyWaits struct {
	id      int64
	cancels map[*waitPlace]struct{}
}

// waitPlace is one waiting request's place.
type waitPlace struct {
	key    string
	cancel context.CancelCauseFunc
}

func newWaits(perKey, maxAll int, active func(context.Context, []string) (map[string]bool, error), log *slog.Logger) *waits {
	return &waits{perKey: perKey, max: maxAll, byKey: map[string]*keyWaits{}, active: active, log: log, checkEvery: waitKeyCheckEvery}
}

// enter takes a place for key k's request: its context ends with the
// request's, or with errKeyGone when the key is revoked or blocked. leave
// gives the place back (call it once).
func (w *waits) enter(ctx context.Context, k *store.AuthKey) (context.Context, func(), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.byKey[k.KeyHash]
	n := 0
	if kw != nil {
		n = len(kw.cancels)
	}
	switch {
	case n >= w.perKey:
		w.countRefused("key")
		return nil, nil, errWaitsFull{fmt.Sprintf(
			"This API key already has %d event streams and long polls open (at most %d at once). Close some, or retry after %d s.",
			n, w.perKey, waitRetryAfter)}
	case w.total >= w.max:
		w.countRefused("all")
		return nil, nil, errWaitsFull{fmt.Sprintf(
			"The server holds as many waiting requests as it may (%d). Retry after %d s, or read the status without waiting.",
			w.max, waitRetryAfter)}
	}
	if kw == nil {
		kw = &keyWaits{id: k.ID, cancels: map[*waitPlace]struct{}{}}
		w.byKey[k.KeyHash] = kw
	}
	wctx, cancel := context.WithCancelCause(ctx)
	p := &waitPlace{key: k.KeyHash, cancel: cancel}
	kw.cancels[p] = struct{}{}
	w.total++
	if !w.checking && w.active != nil {
		w.checking = true
		go w.checkKeys()
	}
	var once sync.Once
	return wctx, func() {
		once.Do(func() {
			cancel(nil)
			w.mu.Lock()
			defer w.mu.Unlock()
			if kw := w.byKey[p.key]; kw != nil {
				if _, ok := kw.cancels[p]; ok {
					delete(kw.cancels, p)
					w.total--
				}
				if len(kw.cancels) == 0 {
					delete(w.byKey, p.key)
				}
			}
		})
	}, nil
}

func (w *waits) countRefused(bound string) {
	if w.refused != nil {
		w.refused.WithLabelValues(bound).Inc()
	}
}

// endKey ends every open wait of key id (its key was revoked here).
func (w *waits) endKey(id int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, kw := range w.byKey {
		if kw.id == id {
			for p := range kw.cancels {
				p.cancel(errKeyGone)
			}
		}
	}
}

// open is how many waits are open, for key id and in all.
func (w *waits) open(id int64) (int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, kw := range w.byKey {
		if kw.id == id {
			n += len(kw.cancels)
		}
	}
	return n, w.total
}

// held is how many waits are open in all.
func (w *waits) held() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}

// checkKeys runs while any wait is open: every waitKeyCheckEvery it asks the
// database, in one query, which keys of the open waits are still usable, and
// ends the waits of the others (revoked or blocked by another process).
func (w *waits) checkKeys() {
	t := time.NewTicker(w.checkEvery)
	defer t.Stop()
	for range t.C {
		w.mu.Lock()
		if w.total == 0 {
			w.checking = false
			w.mu.Unlock()
			return
		}
		hashes := make([]string, 0, len(w.byKey))
		for hash := range w.byKey {
			hashes = append(hashes, hash)
		}
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok, err := w.active(ctx, hashes)
		cancel()
		if err != nil {
			// The database is away: the waits go on; a revoked key's
			// stream ends at the next check that answers.
			w.log.Warn("waits.key_check_failed", "error", err)
			continue
		}
		w.mu.Lock()
		for hash, kw := range w.byKey {
			if !ok[hash] {
				for p := range kw.cancels {
					p.cancel(errKeyGone)
				}
			}
		}
		w.mu.Unlock()
	}
}

// enterWait takes a wait place for the request's key, answering 429 with
// Retry-After when there is none; ok is false when an answer was sent.
func (s *Server) enterWait(c *gin.Context) (context.Context, func(), bool) {
	ctx, leave, err := s.waits.enter(c.Request.Context(), authKey(c))
	var full errWaitsFull
	if errors.As(err, &full) {
		c.Header("Retry-After", strconv.Itoa(waitRetryAfter))
		abortError(c, http.StatusTooManyRequests, full.msg)
		return nil, nil, false
	}
	return ctx, leave, true
}

// keyGone reports whether ctx ended because its key was revoked or blocked.
func keyGone(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errKeyGone) }

// waitsBudget is how many waits the process may hold: want, lowered so
// that the open-file limit keeps fdReserve descriptors for the rest (Go
// raises the soft limit to the hard one at start). The warning is "" when
// want fits.
func waitsBudget(want int) (int, string) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == ^uint64(0) {
		return want, ""
	}
	return waitsBudgetFor(want, lim.Cur)
}

// waitsBudgetFor is waitsBudget for an open-file limit of limit.
func waitsBudgetFor(want int, limit uint64) (int, string) {
	if limit >= uint64(want)+fdReserve {
		return want, ""
	}
	// A quarter of a small limit still goes to waits, so that they work at
	// all; the rest keeps the process's other work safe.
	n := max(int(limit/4), int(limit)-fdReserve)
	n = max(1, min(n, want))
	return n, fmt.Sprintf("the open-file limit (%d) leaves no room for KINFLOW_WAITS_MAX=%d waiting requests beside %d descriptors for everything else; at most %d are held (raise `ulimit -n` to %d or more)",
		limit, want, fdReserve, n, want+fdReserve)
}
