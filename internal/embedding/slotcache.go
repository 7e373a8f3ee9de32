package embedding

import (
	"bytes"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The family manifests' records, kept in memory while a manifest does not
// change. The manifest is one JSON document per family: a plan
// and the check after a method read its files (readSlots) scanned the whole
// document, about 37 ms for a small job on a family of 100,000 files
// (BenchmarkPlanSmallJobOnLargeCache), although a large cache mostly serves
// files written long before. A family whose manifest has not changed for a
// second is parsed once and kept; each later read costs one stat of the
// manifest.
//
// The stat is the key: device, inode, size, modification and inode change
// times. Every writer replaces the manifest (a new inode) or writes it in
// place; either moves its inode change time, which only the kernel sets, to
// the kernel's clock at the write. A manifest is kept only once that time
// lies a second in the past (slotCacheQuiet), so a later write cannot fall
// within the same tick of the kernel's coarse clock and leave the key as it
// was, even when it reuses the inode number and the size. A manifest that
// changes all the time (a burst of new sequences) is never kept and is
// scanned as before.
var slotCache = &familyCache{fams: map[string]*cachedFamily{}}

const (
	// slotCacheMaxRecords bounds the records kept for all families (about
	// 150 bytes each, so at most about 150 MB): the least recently read
	// families go first, and a family larger than this is never kept. A
	// cache at the reference deployment's scale holds families of 300,000
	// files, whose manifest (77 MB) a job's plan would otherwise read whole
	// each time (BenchmarkPlanPresence300k: ×60 a bare stat loop).
	slotCacheMaxRecords = 1_000_000
	// slotCacheQuiet is how long a manifest must have been left alone
	// before it is kept.
	slotCacheQuiet = time.Second
)

type manifestKey struct {
	dev, ino               uint64
	size, mtimeNs, ctimeNs int64
}

func manifestKeyOf(st *unix.Stat_t) manifestKey {
	return manifestKey{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtimeNs: st.Mtim.Nano(), ctimeNs: st.Ctim.Nano()}
}

type cachedFamily struct {
	key  manifestKey
	recs map[string]slotRecord
	used uint64
}

type familyCache struct {
	mu    sync.Mutex
	fams  map[string]*cachedFamily
	kept  int
	clock uint64
	// hits counts the reads answered from memory (tests).
	hits int
}

// lookup returns dir's records when they are kept for key.
func (c *familyCache) lookup(dir string, key manifestKey) map[string]slotRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.fams[dir]
	if f == nil {
		return nil
	}
	if f.key != key {
		c.kept -= len(f.recs)
		delete(c.fams, dir)
		return nil
	}
	c.clock++
	f.used = c.clock
	c.hits++
	return f.recs
}

// keep stores dir's records for key, evicting the least recently read
// families beyond slotCacheMaxRecords.
func (c *familyCache) keep(dir string, key manifestKey, recs map[string]slotRecord) {
	if len(recs) > slotCacheMaxRecords {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.fams[dir]; old != nil {
		c.kept -= len(old.recs)
	}
	c.clock++
	c.fams[dir] = &cachedFamily{key: key, recs: recs, used: c.clock}
	c.kept += len(recs)
	for c.kept > slotCacheMaxRecords {
		var oldest string
		var at uint64
		for d, f := range c.fams {
			if oldest == "" || f.used < at {
				oldest, at = d, f.used
			}
		}
		c.kept -= len(c.fams[oldest].recs)
		delete(c.fams, oldest)
	}
}

// cachedSlots fills slots (by index) from dir's kept records, only those
// of sids[i] with wanted[i] set when wanted is given; it reports false when
// they are not kept (the caller reads the manifest, see
// readManifestForSlots). A missing manifest has no records.
func cachedSlots(path, dir string, index map[string]int, sids []string, wanted []bool, slots []slotRecord) (done bool) {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return true
	}
	recs := slotCache.lookup(dir, manifestKeyOf(&st))
	if recs == nil {
		return false
	}
	if wanted != nil {
		for i, w := range wanted {
			if !w {
				continue
			}
			if r, ok := recs[sids[i]]; ok {
				slots[i] = r
			}
		}
		return true
	}
	for sid, i := range index {
		if r, ok := recs[sid]; ok {
			slots[i] = r
		}
	}
	return true
}

// manifestCount is the entry count a manifest document opens with
// (`{"count":N,` as kinflow's writers put it, keys sorted), or -1 when it
// does not open so. Only a hint, for what to keep: a wrong count costs a
// family its place in the cache, never a record.
func manifestCount(b []byte) int {
	rest, ok := bytes.CutPrefix(b, []byte(`{"count":`))
	if !ok {
		return -1
	}
	n := 0
	for i, c := range rest {
		if c < '0' || c > '9' {
			if i == 0 {
				return -1
			}
			return n
		}
		if n > (1<<31)/10 {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return -1
}

// readManifestForSlots reads the manifest at path with the key of what it
// read; quiet reports that it had been left alone for slotCacheQuiet, so
// that its records may be kept.
func readManifestForSlots(path string) (b []byte, key manifestKey, quiet bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, key, false, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, key, false, err
	}
	// One buffer of the size the stat gave (io.ReadAll's doubling copied
	// and cleared a 77 MB manifest several times over); a manifest that
	// grew meanwhile is still read to its end.
	buf := bytes.NewBuffer(make([]byte, 0, max(st.Size, 0)+bytes.MinRead))
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, key, false, err
	}
	b = buf.Bytes()
	quiet = time.Since(time.Unix(0, st.Ctim.Nano())) >= slotCacheQuiet && int64(len(b)) == st.Size
	return b, manifestKeyOf(&st), quiet, nil
}
