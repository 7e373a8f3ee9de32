package embedding

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func slotHits() int {
	slotCache.mu.Lock()
	defer slotCache.mu.Unlock()
	return slotCache.hits
}

// TestSlotCacheFollowsTheManifest: a family's records are kept once its
// manifest has been quiet for a second, and every change of the manifest
// is seen at the next read: a merge (a new file), a write in place with the
// modification time set back (the inode change time moves), a removal.
func TestSlotCacheFollowsTheManifest(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ManifestName)
	sum := "00000000000000000000000000000000000000000000000000000000000000aa"
	rec := func(bytes int64) Commit {
		return Commit{SeqID: "aaa", Suffix: ".npy", Bytes: bytes, SHA256: sum, MtimeNs: 1, CtimeNs: 2, Ino: 3}
	}
	if err := MergeManifest(dir, []Commit{rec(1000)}, nil); err != nil {
		t.Fatal(err)
	}
	read := func() []slotRecord { return slotsFor(dir, []string{"aaa", "bbb"}) }
	// Fresh: scanned, not kept.
	h := slotHits()
	if s := read(); !s[0].listed || s[0].bytes != 1000 || s[1].listed || slotHits() != h {
		t.Fatalf("fresh manifest: %+v, hits %d", s, slotHits()-h)
	}
	time.Sleep(slotCacheQuiet + 100*time.Millisecond)
	read() // parsed and kept
	if s := read(); !s[0].listed || s[0].bytes != 1000 || !s[0].hashed || slotHits() != h+1 {
		t.Fatalf("quiet manifest: %+v, hits %d", s, slotHits()-h)
	}
	// A merge replaces the manifest.
	if err := MergeManifest(dir, []Commit{rec(2000)}, nil); err != nil {
		t.Fatal(err)
	}
	if s := read(); s[0].bytes != 2000 {
		t.Fatalf("after a merge: %+v", s)
	}
	time.Sleep(slotCacheQuiet + 100*time.Millisecond)
	read()
	if s := read(); s[0].bytes != 2000 || slotHits() != h+2 {
		t.Fatalf("kept again: %+v, hits %d", s, slotHits()-h)
	}
	// The same size written in place, its modification time set back.
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	forged := bytes.Replace(b, []byte(`"bytes":2000`), []byte(`"bytes":3000`), 1)
	if bytes.Equal(forged, b) {
		t.Fatalf("no record to change in %s", b)
	}
	if err := os.WriteFile(path, forged, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if s := read(); s[0].bytes != 3000 {
		t.Fatalf("after a write in place with the old mtime: %+v", s)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if s := read(); s[0].listed {
		t.Fatalf("after the manifest's removal: %+v", s)
	}
}

// TestSlotCacheBound: the records kept stay under slotCacheMaxRecords, the
// least recently read family going first.
func TestSlotCacheBound(t *testing.T) {
	c := &familyCache{fams: map[string]*cachedFamily{}}
	big := func() map[string]slotRecord {
		m := make(map[string]slotRecord, slotCacheMaxRecords/2)
		for i := range slotCacheMaxRecords / 2 {
			m[strconv.Itoa(i)] = slotRecord{}
		}
		return m
	}
	k := manifestKey{ino: 1}
	c.keep("a", k, big())
	c.keep("b", k, big())
	if c.lookup("a", k) == nil { // a is now the most recently read
		t.Fatal("a not kept")
	}
	c.keep("c", k, big())
	if c.kept > slotCacheMaxRecords || c.lookup("b", k) != nil || c.lookup("a", k) == nil || c.lookup("c", k) == nil {
		t.Fatalf("kept %d records; families %v", c.kept, len(c.fams))
	}
	if c.lookup("a", manifestKey{ino: 2}) != nil || c.fams["a"] != nil {
		t.Fatal("a family read at another key stayed")
	}
	c.keep("huge", k, map[string]slotRecord{"one": {}})
	tooBig := make(map[string]slotRecord, slotCacheMaxRecords+1)
	for i := range slotCacheMaxRecords + 1 {
		tooBig[strconv.Itoa(i)] = slotRecord{}
	}
	c.keep("huge", k, tooBig)
	if c.lookup("huge", k) == nil || len(c.lookup("huge", k)) != 1 {
		t.Fatal("a family over the bound replaced what was kept")
	}
}

// TestSlotCacheSkipsFamiliesOverTheBound: a manifest whose count says it
// holds more records than the cache keeps is read for the records asked
// for and not kept (no record is gathered for it); a wrong count costs
// only the caching, never a record.
func TestSlotCacheSkipsFamiliesOverTheBound(t *testing.T) {
	for doc, want := range map[string]int{
		`{"count":300000,"entries":{}}`: 300000,
		`{"count":0,"entries":{}}`:      0,
		`{"entries":{},"count":3}`:      -1,
		`{"count":"3"}`:                 -1,
		`{"count":`:                     -1,
		`{"count":99999999999999}`:      -1,
	} {
		if got := manifestCount([]byte(doc)); got != want {
			t.Errorf("manifestCount(%s) = %d, want %d", doc, got, want)
		}
	}
	dir := t.TempDir()
	sum := "00000000000000000000000000000000000000000000000000000000000000aa"
	if err := MergeManifest(dir, []Commit{{SeqID: "aaa", Suffix: ".npy", Bytes: 1000, SHA256: sum, MtimeNs: 1, CtimeNs: 2, Ino: 3}}, nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, ManifestName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lied := bytes.Replace(b, []byte(`{"count":1,`), []byte(`{"count":`+strconv.Itoa(slotCacheMaxRecords+1)+`,`), 1)
	if bytes.Equal(lied, b) {
		t.Fatalf("manifest does not open with its count: %s", b)
	}
	if err := os.WriteFile(path, lied, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(slotCacheQuiet + 100*time.Millisecond)
	h := slotHits()
	for range 2 {
		if s := slotsFor(dir, []string{"aaa", "bbb"}); !s[0].listed || s[0].bytes != 1000 || !s[0].hashed || s[1].listed {
			t.Fatalf("records: %+v", s)
		}
	}
	if slotHits() != h {
		t.Fatalf("a family over the bound was kept (%d hits)", slotHits()-h)
	}
}
