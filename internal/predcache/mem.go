package predcache

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultMemoryEntries is the memory tier's default bound: about 130 bytes
// an entry in Go's map, so some 26 MB for 200,000 entries — twenty
// 10,000-unit stages.
const DefaultMemoryEntries = 200_000

// memTier holds entries this process looked up or stored, so that a job
// repeated on the same worker is served without a database round trip.
// Entries never change once stored (a key names everything its value
// depends on), so the tier needs no invalidation except a purge: every
// Purge bumps prediction_cache_epoch, and a lookup that sees another epoch
// drops the tier first. When full, the tier is emptied and fills again (no
// per-entry bookkeeping on the hot path).
type memTier struct {
	mu      sync.Mutex
	max     int
	epoch   int64
	entries map[Key]Entry
}

// WithMemory puts a memory tier of at most max entries in front of the
// database (max <= 0: DefaultMemoryEntries) and returns c.
func (c *Cache) WithMemory(max int) *Cache {
	if max <= 0 {
		max = DefaultMemoryEntries
	}
	c.mem = &memTier{max: max, epoch: -1, entries: map[Key]Entry{}}
	return c
}

func (m *memTier) clear() {
	m.mu.Lock()
	m.entries = map[Key]Entry{}
	m.mu.Unlock()
}

func (m *memTier) add(k Key, e Entry) {
	if len(m.entries) >= m.max {
		m.entries = make(map[Key]Entry, m.max/4)
	}
	m.entries[k] = e
}

// epoch reads the purge counter.
func (c *Cache) epoch(ctx context.Context) (int64, error) {
	var n int64
	if err := c.st.DB.WithContext(ctx).Raw("SELECT epoch FROM prediction_cache_epoch WHERE id = 1").Scan(&n).Error; err != nil {
		return 0, fmt.Errorf("read prediction cache epoch: %w", err)
	}
	return n, nil
}

// Lookup returns the cached entries of keys, by key; a missing key is
// absent from the map. With a memory tier, the keys it holds are answered
// from memory (after one read of the purge epoch) and only the rest are
// looked up in the database.
func (c *Cache) Lookup(ctx context.Context, keys []Key) (map[Key]Entry, error) {
	if c.mem == nil {
		return c.lookupDB(ctx, keys)
	}
	ep, err := c.epoch(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[Key]Entry, len(keys))
	var miss []Key
	c.mem.mu.Lock()
	if ep != c.mem.epoch {
		c.mem.entries = map[Key]Entry{}
		c.mem.epoch = ep
	}
	for _, k := range keys {
		if e, ok := c.mem.entries[k]; ok {
			out[k] = e
		} else {
			miss = append(miss, k)
		}
	}
	c.mem.mu.Unlock()
	if len(miss) == 0 {
		return out, nil
	}
	found, err := c.lookupDB(ctx, miss)
	if err != nil {
		return nil, err
	}
	c.mem.mu.Lock()
	for k, e := range found {
		out[k] = e
		if c.mem.epoch == ep {
			c.mem.add(k, e)
		}
	}
	c.mem.mu.Unlock()
	return out, nil
}

// Store writes entries for method at modelVersion, stamped now (see
// storeDB), and keeps them in the memory tier as the database now has
// them: an entry present stands, unless storeDB replaced it (one without
// its method's uncertainty, by one with it).
func (c *Cache) Store(ctx context.Context, method, modelVersion string, puts []Put, now time.Time) error {
	if c.mem == nil {
		return c.storeDB(ctx, method, modelVersion, puts, now)
	}
	ep, err := c.epoch(ctx)
	if err != nil {
		return err
	}
	if err := c.storeDB(ctx, method, modelVersion, puts, now); err != nil {
		return err
	}
	c.mem.mu.Lock()
	defer c.mem.mu.Unlock()
	if c.mem.epoch != ep {
		// A purge happened since this tier was filled: start over rather
		// than mix generations.
		c.mem.entries = map[Key]Entry{}
		c.mem.epoch = ep
	}
	at := now.UTC().Truncate(time.Millisecond)
	for _, p := range puts {
		if old, ok := c.mem.entries[p.Key]; !ok || (p.UncertaintyRecorded && !old.UncertaintyRecorded) {
			c.mem.add(p.Key, Entry{Value: p.Value, Error: p.Error, Uncertainty: p.Uncertainty, UncertaintyRecorded: p.UncertaintyRecorded, FirstComputed: at})
		}
	}
	return nil
}
