package provenance

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/kinflow/kinflow/internal/fsutil"
)

// EnvHashCache names the file where SHA-256 sums of weights files are
// remembered (default: DefaultHashCachePath).
const EnvHashCache = "KINFLOW_HASH_CACHE"

// DefaultHashCachePath is the user's cache folder's kinflow/sha256.json
// (for instance ~/.cache/kinflow/sha256.json), or "" when the system has no
// such folder (sums are then recomputed at each start).
func DefaultHashCachePath() string {
	if p := os.Getenv(EnvHashCache); p != "" {
		return p
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "kinflow", "sha256.json")
}

var (
	sharedOnce sync.Once
	shared     *HashCache
)

// SharedHashCache is the process's HashCache over DefaultHashCachePath.
func SharedHashCache() *HashCache {
	sharedOnce.Do(func() { shared = NewHashCache(DefaultHashCachePath()) })
	return shared
}

// CommandFingerprint identifies a program that reports no fingerprint of
// its own: the SHA-256 of its executable (found on PATH) and of every other
// command-line token that names an existing file or folder (a script, a
// checkpoint, a model folder), with model as the model name ("unreported"
// when empty).
func CommandFingerprint(hc *HashCache, argv []string, model string) (Fingerprint, error) {
	if len(argv) == 0 {
		return Fingerprint{}, errors.New("fingerprint of an empty command")
	}
	if model == "" {
		model = "unreported"
	}
	fp := Fingerprint{Model: model, Program: filepath.Base(argv[0]), Weights: map[string]string{}}
	if exe, err := exec.LookPath(argv[0]); err == nil {
		if s, err := hc.Sum(exe); err == nil {
			fp.ProgramVersion = s
		}
	}
	for _, a := range argv[1:] {
		st, err := os.Stat(a)
		if err != nil || !(st.Mode().IsRegular() || st.IsDir()) || a == os.DevNull {
			continue
		}
		sums, err := hc.SumTree(a)
		if err != nil {
			return Fingerprint{}, err
		}
		for k, v := range sums {
			fp.Weights[filepath.Base(a)+"/"+k] = v
		}
	}
	return fp, nil
}

// HashCache computes SHA-256 sums of files and remembers them by absolute
// path, size and modification time in a small JSON file, so that a 650M
// checkpoint is read once, not at every start. A file whose size or mtime
// changed is hashed again. Safe for concurrent use.
type HashCache struct {
	path string
	mu   sync.Mutex
	m    map[string]hashEntry
}

type hashEntry struct {
	Size    int64  `json:"size"`
	MtimeNS int64  `json:"mtime_ns"`
	SHA256  string `json:"sha256"`
}

// NewHashCache opens the cache stored in path ("" keeps it in memory only).
// A missing or unreadable file starts empty.
func NewHashCache(path string) *HashCache {
	c := &HashCache{path: path, m: map[string]hashEntry{}}
	if path != "" {
		if b, err := os.ReadFile(path); err == nil {
			_ = json.Unmarshal(b, &c.m)
			if c.m == nil {
				c.m = map[string]hashEntry{}
			}
		}
	}
	return c
}

// Sum is the SHA-256 (hex) of the file at path.
func (c *HashCache) Sum(path string) (string, error) {
	s, changed, err := c.sum(path)
	if changed {
		c.save()
	}
	return s, err
}

// sum is Sum without saving; changed says a sum was computed.
func (c *HashCache) sum(path string) (string, bool, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", false, err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", false, fmt.Errorf("hash %s: %w", filepath.Base(path), err)
	}
	if !st.Mode().IsRegular() {
		return "", false, fmt.Errorf("hash %s: not a regular file", filepath.Base(path))
	}
	c.mu.Lock()
	e, ok := c.m[abs]
	c.mu.Unlock()
	if ok && e.Size == st.Size() && e.MtimeNS == st.ModTime().UnixNano() {
		return e.SHA256, false, nil
	}
	f, err := os.Open(abs)
	if err != nil {
		return "", false, fmt.Errorf("hash %s: %w", filepath.Base(path), err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", false, fmt.Errorf("hash %s: %w", filepath.Base(path), err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	c.mu.Lock()
	c.m[abs] = hashEntry{Size: st.Size(), MtimeNS: st.ModTime().UnixNano(), SHA256: sum}
	c.mu.Unlock()
	return sum, true, nil
}

// SumTree is the SHA-256 of every regular file under path (a file or a
// folder such as a Hugging Face model directory), keyed by the file's path
// relative to path (a file: its base name); Python bytecode caches
// (__pycache__, *.pyc) are left out.
func (c *HashCache) SumTree(path string) (map[string]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("hash %s: %w", filepath.Base(path), err)
	}
	out := map[string]string{}
	if !st.IsDir() {
		s, err := c.Sum(path)
		if err != nil {
			return nil, err
		}
		out[filepath.Base(path)] = s
		return out, nil
	}
	var files []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// Python's bytecode caches are written by running the program
		// (a model folder's scripts, a step program's source tree): the
		// sums must not change because it ran.
		if d.IsDir() && d.Name() == "__pycache__" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() && !strings.HasSuffix(d.Name(), ".pyc") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("hash %s: %w", filepath.Base(path), err)
	}
	sort.Strings(files)
	changed := false
	// One save for the whole folder, not one per file.
	defer func() {
		if changed {
			c.save()
		}
	}()
	for _, p := range files {
		s, ch, err := c.sum(p)
		changed = changed || ch
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(path, p)
		out[filepath.ToSlash(rel)] = s
	}
	return out, nil
}

// save writes the cache file atomically; failures only cost a rehash later.
func (c *HashCache) save() {
	if c.path == "" {
		return
	}
	c.mu.Lock()
	b, err := json.Marshal(c.m)
	c.mu.Unlock()
	if err != nil {
		return
	}
	if os.MkdirAll(filepath.Dir(c.path), 0o755) == nil {
		_ = fsutil.WriteFileAtomic(c.path, b, 0o644)
	}
}
