package api

import (
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/store"
)

// keyCache keeps the key lookups of status reads (GET /status/<id>/ and its
// event stream) for keyCacheTTL, so that a client waiting on its jobs costs
// no database round trip per answer for its key: on the production
// topology's burst, 13 of a small job's 116 statements on kinflow's
// database were these lookups, one per status answer (docs/BENCHMARKS.md).
//
// What it changes, bounded by keyCacheTTL: a key revoked, or an owner
// blocked, by another process (the other api, the `kinflow keys` CLI) may
// still read its own jobs' statuses for up to that long, and the
// X-RateLimit-Remaining of a status answer may lag the key's submits by as
// much. A revocation through this process empties the cache at once. Every
// other route (submit, quota, results, the key routes) looks its key up
// afresh. (golang-lru's expirable cache would do, but its janitor wakes
// every TTL/100 for the life of each Server.)
type keyCache struct {
	mu sync.Mutex
	m  map[string]keyCached
	// gen counts forget calls: a lookup that began before one is not
	// recorded after it.
	gen uint64
}

type keyCached struct {
	k  store.AuthKey
	at time.Time
}

// keyCacheTTL is the longest a status read's key lookup is reused.
const keyCacheTTL = time.Second

// keyCacheMax bounds the cache; past it, stale entries are dropped, and if
// none is stale the whole cache is.
const keyCacheMax = 4096

// get returns a copy of hash's key looked up for day less than keyCacheTTL
// ago (by the process's clock); gen is what put needs, hit or miss.
func (kc *keyCache) get(hash, day string) (k *store.AuthKey, gen uint64, ok bool) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	e, found := kc.m[day+hash]
	if !found || !fresh(e.at, time.Now()) {
		return nil, kc.gen, false
	}
	c := e.k
	return &c, kc.gen, true
}

// put records k, looked up for day just now, unless the cache was emptied
// since get returned gen.
func (kc *keyCache) put(hash, day string, k *store.AuthKey, gen uint64) {
	now := time.Now()
	kc.mu.Lock()
	defer kc.mu.Unlock()
	if gen != kc.gen {
		return
	}
	if kc.m == nil {
		kc.m = map[string]keyCached{}
	}
	if len(kc.m) >= keyCacheMax {
		for h, e := range kc.m {
			if !fresh(e.at, now) {
				delete(kc.m, h)
			}
		}
		if len(kc.m) >= keyCacheMax {
			clear(kc.m)
		}
	}
	kc.m[day+hash] = keyCached{k: *k, at: now}
}

// fresh reports whether a lookup made at at may still be served at now.
func fresh(at, now time.Time) bool {
	return now.Sub(at) < keyCacheTTL && !now.Before(at)
}

// forget empties the cache (a key revoked through this process).
func (kc *keyCache) forget() {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	kc.gen++
	clear(kc.m)
}
