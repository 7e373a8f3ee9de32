package embedding

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kinflow/kinflow/internal/fsutil"
)

// ManifestName is the per-folder manifest of the cache write protocol
// (docs/embedding.md, "Writing artefacts").
const ManifestName = "manifest.json"

// manifestLockName is the lock file that serialises manifest merges among
// kinflow writers (the reference's writers do not take it; a merge racing
// with one of theirs can lose entries, which is harmless because presence is
// decided by the files themselves, see listPresent).
const manifestLockName = ".manifest.lock"

// ManifestVersion is the manifest format version.
const ManifestVersion = 1

// Commit is one artefact written to a cache folder, for the manifest merge.
type Commit struct {
	SeqID     string
	Suffix    string
	Bytes     int64
	Synthetic bool
	// SHA256 (hex), MtimeNs, CtimeNs and Ino are the file's integrity
	// record: the planner trusts a file whose size, modification time,
	// inode change time and inode still match and hashes one whose stat
	// differs (integrity.go). Empty/zero: none. A writer records the temp
	// file's stat before the rename, which moves the inode change time on
	// most file systems: the first check hashes the file once and records
	// the final time.
	SHA256  string
	MtimeNs int64
	CtimeNs int64
	Ino     uint64
	// RecordOnly updates only the entry's integrity record (bytes, sha256,
	// mtime_ns) of a file already in place: its origin flag is kept.
	RecordOnly bool
}

// writeArtefactTemp writes data to a hidden temp file beside
// dir/<sid><suffix> with the cache write protocol (fsutil), not
// yet renamed into place; sync as in fsutil.WriteTemp.
func writeArtefactTemp(dir, sid, suffix string, data []byte, sync bool) (fsutil.Temp, error) {
	if !ValidSeqID(sid) {
		return fsutil.Temp{}, fmt.Errorf("write artefact: invalid seq id %q", sid)
	}
	t, err := fsutil.WriteTemp(filepath.Join(dir, sid+suffix), 0o644, sync, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	if err != nil {
		return fsutil.Temp{}, fmt.Errorf("write artefact: %w", err)
	}
	return t, nil
}

// lockFile takes an exclusive flock on path (created if absent) and returns
// the unlock function. flock is per open file, so it serialises goroutines of
// one process as well as processes; on NFS Linux maps it to a POSIX lock,
// which the server arbitrates across hosts.
func lockFile(path string, exclusive bool) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// ManifestEntry is one manifest entry as kinflow reads it.
type ManifestEntry struct {
	Bytes     int64   `json:"bytes"`
	Filename  string  `json:"filename"`
	Ready     bool    `json:"ready"`
	Synthetic bool    `json:"synthetic,omitempty"`
	UpdatedAt float64 `json:"updated_at"`
	// SHA256 (hex), MtimeNs and CtimeNs (the file's modification and
	// inode change times in Unix nanoseconds) and Ino (its inode number)
	// are the integrity record (integrity.go).
	SHA256  string `json:"sha256,omitempty"`
	MtimeNs int64  `json:"mtime_ns,omitempty"`
	CtimeNs int64  `json:"ctime_ns,omitempty"`
	Ino     uint64 `json:"ino,omitempty"`
	// MAC (hex) authenticates the record with the record key
	// (recordkey.go); empty: unauthenticated.
	MAC string `json:"mac,omitempty"`
}

// ReadManifest returns the entries of dir/manifest.json by seq id; a missing
// or unreadable manifest is empty (it is advisory, see Presence).
func ReadManifest(dir string) map[string]ManifestEntry {
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return map[string]ManifestEntry{}
	}
	var m struct {
		Entries map[string]ManifestEntry `json:"entries"`
	}
	if json.Unmarshal(b, &m) != nil || m.Entries == nil {
		return map[string]ManifestEntry{}
	}
	return m.Entries
}

// SyntheticInManifest returns the seq ids that dir/manifest.json flags
// `"synthetic": true`. It decodes only that flag, and nothing at all when
// the file does not mention it: planners call it on large folders.
func SyntheticInManifest(dir string) map[string]bool {
	out := map[string]bool{}
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil || !bytes.Contains(b, []byte(`"synthetic"`)) {
		return out
	}
	var m struct {
		Entries map[string]struct {
			Synthetic bool `json:"synthetic"`
		} `json:"entries"`
	}
	if json.Unmarshal(b, &m) != nil {
		return out
	}
	for sid, e := range m.Entries {
		if e.Synthetic {
			out[sid] = true
		}
	}
	return out
}

// MergeManifest adds commits to dir/manifest.json and removes the entries of
// the ids in remove, then atomically replaces it: `{"count": N, "entries":
// {sid: {"bytes", "filename", "ready": true, "updated_at"}}, "updated_at",
// "version": 1}`, compact JSON with sorted keys, the form the reference's
// GPU workers write and read. Fields other
// writers put in entries or at the top are kept. kinflow's synthetic
// artefacts carry `"synthetic": true` in their entry. Concurrent kinflow
// writers are serialised by a lock file in dir.
func MergeManifest(dir string, commits []Commit, remove []string) error {
	if len(commits) == 0 && len(remove) == 0 {
		return nil
	}
	if err := ensureDir(dir); err != nil {
		return err
	}
	unlock, err := lockManifest(dir)
	if err != nil {
		return err
	}
	defer unlock()
	return mergeManifestLocked(dir, commits, remove)
}

// ForgetRemoved drops from dir's manifest the records of the files GC
// removed (sid → the path it removed), under the lock every writer takes,
// and only for those still absent: a file computed again since its
// eviction (a job that found it missing) keeps the record its writer
// merged, or is about to merge. Dropping every evicted id, as before, lost
// such a fresh record, so the next job quarantined the new file and
// computed it a third time.
func ForgetRemoved(dir string, removed map[string]string) error {
	if len(removed) == 0 {
		return nil
	}
	unlock, err := lockManifest(dir)
	if err != nil {
		return err
	}
	defer unlock()
	var gone []string
	for sid, path := range removed {
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			gone = append(gone, sid)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	return mergeManifestLocked(dir, nil, gone)
}

// lockManifest takes dir's manifest lock (the one every kinflow writer,
// Go or Python, takes to merge the manifest).
func lockManifest(dir string) (func(), error) {
	return lockFile(filepath.Join(dir, manifestLockName), true)
}

// mergeManifestLocked is MergeManifest for a caller holding the lock.
//
// The manifest is one JSON document for the whole family (the reference's
// format, which kinflow keeps so one cache serves both), so a
// batch's merge rewrites every entry. The document is checked whole
// (json.Valid), then cut into its values without decoding them (jscan);
// only the entries the batch changes are decoded, and every other value,
// with the keys of other writers (the reference's tools, kinflow's Python
// steps) that kinflow does not know, is written back as it was read.
// Decoding the whole document into maps and encoding it again cost
// 0.7–0.9 s and 400 MB per small batch on a family of 100,000 files
// (BenchmarkMergeSmallBatch). A manifest that is not valid JSON is started
// afresh, as before.
func mergeManifestLocked(dir string, commits []Commit, remove []string) error {
	path := filepath.Join(dir, ManifestName)
	top, entries := map[string][]byte{}, map[string][]byte{}
	if b, err := os.ReadFile(path); err == nil {
		if t, e, ok := splitManifest(b); ok {
			top, entries = t, e
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read manifest %s: %w", path, err)
	}
	now := unixFloat(time.Now())
	for _, sid := range remove {
		delete(entries, sid)
	}
	for _, c := range commits {
		e := map[string]any{}
		if raw, ok := entries[c.SeqID]; ok {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			if dec.Decode(&e) != nil || e == nil {
				e = map[string]any{}
			}
		}
		e["bytes"] = c.Bytes
		e["filename"] = c.SeqID + c.Suffix
		e["ready"] = true
		if c.RecordOnly {
			setRecord(e, c)
		} else {
			e["updated_at"] = now
			if c.Synthetic {
				e["synthetic"] = true
			} else {
				delete(e, "synthetic")
			}
			// A new file without an integrity record drops the old file's:
			// a stale hash would quarantine the new file.
			if c.SHA256 != "" {
				setRecord(e, c)
			} else {
				for _, k := range recordKeys {
					delete(e, k)
				}
			}
		}
		signEntry(dir, c.SeqID, e)
		raw, err := encodeJSON(e)
		if err != nil {
			return fmt.Errorf("encode manifest entry %s: %w", c.SeqID, err)
		}
		entries[c.SeqID] = raw
	}
	top["count"] = []byte(strconv.Itoa(len(entries)))
	top["updated_at"] = []byte(now)
	top["version"] = []byte(strconv.Itoa(ManifestVersion))
	size := 0
	for _, v := range entries {
		size += len(v) + 80
	}
	out := make([]byte, 0, size+1024)
	out = append(out, '{')
	// top holds every key but "entries" (splitManifest).
	keys := append(slices.Collect(maps.Keys(top)), "entries")
	slices.Sort(keys)
	for i, k := range keys {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendJSONString(out, k)
		out = append(out, ':')
		if k != "entries" {
			out = append(out, top[k]...)
			continue
		}
		out = append(out, '{')
		for j, sid := range slices.Sorted(maps.Keys(entries)) {
			if j > 0 {
				out = append(out, ',')
			}
			out = appendJSONString(out, sid)
			out = append(out, ':')
			out = append(out, entries[sid]...)
		}
		out = append(out, '}')
	}
	out = append(out, '}')
	if err := fsutil.WriteFileAtomic(path, out, 0o644); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	return nil
}

// splitManifest cuts a manifest document into its top-level values and its
// entries' values, each the bytes of the document (not copied, not
// decoded); "entries" itself is left out of top. ok is false unless b is
// one valid JSON object, optionally followed by white space (what follows
// a first value, the old decoder ignored; such a document now starts
// afresh too) and "entries", when present, an object.
func splitManifest(b []byte) (top, entries map[string][]byte, ok bool) {
	if !json.Valid(b) {
		return nil, nil, false
	}
	top, entries = map[string][]byte{}, map[string][]byte{}
	s := &jscan{b: b}
	value := func() ([]byte, bool) {
		s.ws()
		start := s.i
		if !s.skip() {
			return nil, false
		}
		return b[start:s.i], true
	}
	ok = s.object(func(key string) bool {
		if key != "entries" {
			v, ok := value()
			top[key] = v
			return ok
		}
		if s.peek() != '{' {
			// Not an object: dropped, as the old merge dropped it.
			_, ok := value()
			return ok
		}
		return s.object(func(sid string) bool {
			v, ok := value()
			entries[sid] = v
			return ok
		})
	})
	return top, entries, ok
}

// appendJSONString appends s as a JSON string (without HTML escaping, as
// the manifest's encoder writes it).
func appendJSONString(dst []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	b, _ := encodeJSON(s)
	return append(dst, b...)
}

// encodeJSON is v as compact JSON with sorted object keys and without HTML
// escaping (the manifest's encoding).
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// recordKeys are a manifest entry's integrity record fields.
var recordKeys = []string{"sha256", "mtime_ns", "ctime_ns", "ino", "mac"}

// setRecord puts c's integrity record into entry e; a record without the
// inode fields drops stale ones.
func setRecord(e map[string]any, c Commit) {
	e["sha256"] = c.SHA256
	e["mtime_ns"] = c.MtimeNs
	if c.CtimeNs != 0 || c.Ino != 0 {
		e["ctime_ns"] = c.CtimeNs
		e["ino"] = c.Ino
	} else {
		delete(e, "ctime_ns")
		delete(e, "ino")
	}
}

// unixFloat is t as Unix seconds with microseconds, like Python's time.time().
func unixFloat(t time.Time) json.Number {
	return json.Number(fmt.Sprintf("%d.%06d", t.Unix(), t.Nanosecond()/1000))
}

// isTempName reports whether a directory entry is a writer's temp file or
// lock (hidden names); such files are never artefacts.
func isTempName(name string) bool { return strings.HasPrefix(name, ".") }
