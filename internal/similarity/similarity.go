// Package similarity measures how close query proteins are to the training
// data of the prediction methods (docs/similarity.md): an MMseqs2
// search of the sequences against each dataset's training-set FASTA, reduced
// to the max and mean percent identity (pident, 0–100) over the hits.
//
// The target database of a dataset is built by kinflow itself, once per
// FASTA content (its SHA-256), under <root>/<slug>/<hash>/, with a file lock
// so that two processes never build the same database at once; a changed
// FASTA gets a new hash, hence a new build. Every result is cached per
// (sequence, dataset build) in an append-only file beside the database, so a
// sequence is never searched twice against the same build.
package similarity

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kinflow/kinflow/internal/mediaroot"
)

// Search parameters: the reference deployment's values, so that its
// similarity figures and kinflow's agree.
var searchArgs = []string{"--max-seqs", "1000", "-s", "7.5", "-e", "0.001"}

// Dataset is one training set: its label (the /validate/ key), the FASTA
// of its sequences, and the methods it serves.
type Dataset struct {
	Label   string
	FASTA   string
	Methods []string
}

// Identity is one sequence's similarity to a dataset: the max and mean
// percent identity (0–100) over its hits; both 0 when it has none.
type Identity struct {
	Max  float64
	Mean float64
	Hits int
}

// Searcher runs searches against dataset builds under Root. It is safe for
// concurrent use; one Searcher per process.
type Searcher struct {
	// Root holds the builds: <Root>/<slug>/<hash>/{db/,results.tsv}.
	Root string
	// Mmseqs is the mmseqs2 program; empty: "mmseqs" on PATH.
	Mmseqs string
	// Threads is mmseqs --threads; 0 leaves mmseqs' default (every core).
	Threads int
	// Index makes builds also run `createindex` (see docs/BENCHMARKS.md).
	Index bool
	// BatchSize is the most queries one mmseqs search gets; every batch's
	// results are cached as soon as it ends, so a search cut short by a
	// deadline keeps its progress. 0: 2000.
	BatchSize int
	// Log receives similarity.* events; nil: slog.Default().
	Log *slog.Logger

	mu     sync.Mutex
	hashes map[string]fileHash // FASTA path → hash at (size, mtime)
	builds map[string]*build   // build dir → its cache
}

type fileHash struct {
	size  int64
	mtime time.Time
	hash  string
}

// build is one dataset build's result cache, loaded once per process and
// kept in step with other processes' appends.
type build struct {
	dir string
	mu  sync.Mutex
	// results are the cached identities by sequence SHA-256.
	results map[[32]byte]Identity
	// offset is how far results.tsv has been read.
	offset int64
}

func (s *Searcher) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

func (s *Searcher) program() string {
	if s.Mmseqs != "" {
		return s.Mmseqs
	}
	return "mmseqs"
}

// Available reports whether the mmseqs program is installed (an executable
// on PATH or at Mmseqs). It starts no process: /health/ calls it on every
// probe.
func (s *Searcher) Available(ctx context.Context) error {
	if _, err := exec.LookPath(s.program()); err != nil {
		return fmt.Errorf("mmseqs: %w", err)
	}
	return nil
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// Slug is the folder name of a dataset label ("F/A" → "F_A").
func Slug(label string) string {
	s := unsafeChars.ReplaceAllString(label, "_")
	if s == "" {
		return "_"
	}
	return s
}

// Present reports whether the dataset's FASTA exists and is a regular file
// (the condition for the dataset to appear in /validate/).
func (d Dataset) Present() bool {
	fi, err := os.Stat(d.FASTA)
	return err == nil && fi.Mode().IsRegular()
}

// hashFASTA returns the SHA-256 of the FASTA's content, remembered per
// (path, size, mtime) so a large file is hashed once per change.
func (s *Searcher) hashFASTA(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("dataset FASTA: %w", err)
	}
	s.mu.Lock()
	h, ok := s.hashes[path]
	s.mu.Unlock()
	if ok && h.size == fi.Size() && h.mtime.Equal(fi.ModTime()) {
		return h.hash, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("dataset FASTA: %w", err)
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return "", fmt.Errorf("hash dataset FASTA %s: %w", path, err)
	}
	hash := hex.EncodeToString(sum.Sum(nil))
	s.mu.Lock()
	if s.hashes == nil {
		s.hashes = map[string]fileHash{}
	}
	s.hashes[path] = fileHash{size: fi.Size(), mtime: fi.ModTime(), hash: hash}
	s.mu.Unlock()
	return hash, nil
}

// BuildDir returns the folder of the dataset's current build (FASTA content
// hash), building its target database first if needed. The build runs under
// an exclusive file lock; a process that finds the lock held waits for it,
// then uses the finished build.
func (s *Searcher) BuildDir(ctx context.Context, d Dataset) (string, error) {
	hash, err := s.hashFASTA(d.FASTA)
	if err != nil {
		return "", err
	}
	// 24 hex digits (96 bits) name the build; collisions are not a concern.
	dir := filepath.Join(s.Root, Slug(d.Label), hash[:24])
	done := filepath.Join(dir, "db", "DONE")
	if _, err := os.Stat(done); err == nil {
		return dir, nil
	}
	// The build runs to its end even when the caller stops waiting (a
	// /validate/ request past its bound, a cancelled job): it is shared
	// work, and a killed build would be started again by the next caller.
	type built struct {
		dir string
		err error
	}
	res := make(chan built, 1)
	go func() {
		dir, err := s.buildDB(context.WithoutCancel(ctx), d, dir, hash)
		res <- built{dir, err}
	}()
	select {
	case b := <-res:
		return b.dir, b.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// buildDB makes dir's database under its build lock (BuildDir).
func (s *Searcher) buildDB(ctx context.Context, d Dataset, dir, hash string) (string, error) {
	done := filepath.Join(dir, "db", "DONE")
	if err := mediaroot.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("similarity build folder: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, "build.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(done); err == nil {
		return dir, nil
	}
	start := time.Now()
	tmp, err := os.MkdirTemp(dir, ".db-*")
	if err != nil {
		return "", fmt.Errorf("similarity build: %w", err)
	}
	defer os.RemoveAll(tmp)
	target := filepath.Join(tmp, "targetDB")
	if err := s.run(ctx, "createdb", d.FASTA, target, "-v", "1"); err != nil {
		return "", fmt.Errorf("build similarity database %s: %w", d.Label, err)
	}
	if s.Index {
		idxTmp := filepath.Join(tmp, "tmp")
		args := append([]string{"createindex", target, idxTmp, "-v", "1"}, "-s", "7.5")
		args = append(args, s.threadArgs()...)
		if err := s.run(ctx, args...); err != nil {
			return "", fmt.Errorf("index similarity database %s: %w", d.Label, err)
		}
		_ = os.RemoveAll(idxTmp)
	}
	if err := os.WriteFile(filepath.Join(tmp, "DONE"), []byte(d.FASTA+"\n"+hash+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("similarity build: %w", err)
	}
	_ = os.RemoveAll(filepath.Join(dir, "db")) // a half-renamed earlier attempt
	if err := os.Rename(tmp, filepath.Join(dir, "db")); err != nil {
		return "", fmt.Errorf("similarity build: %w", err)
	}
	s.log().Info("similarity database built", "event", "similarity.db_built", "dataset", d.Label, "hash", hash[:24], "seconds", time.Since(start).Seconds())
	return dir, nil
}

func (s *Searcher) threadArgs() []string {
	if s.Threads > 0 {
		return []string{"--threads", strconv.Itoa(s.Threads)}
	}
	return nil
}

// run runs mmseqs with args; its output is kept only for the error.
func (s *Searcher) run(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, s.program(), args...)
	// A cancelled search must not leave mmseqs' worker threads running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("mmseqs %s: %w: %s", args[0], err, lastLine(out))
	}
	return nil
}

func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// lockFile takes an exclusive flock on path, polling so ctx can end the wait.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("similarity lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("similarity lock %s: %w", filepath.Base(path), err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, ctx.Err()
		// A build or an append holds the lock for seconds at most; a
		// 100 ms poll adds little to that.
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Search returns the identity of every sequence of seqs against dataset d,
// keyed by sequence. Cached results are used; the others are searched in
// batches and cached as each batch ends. Empty strings are ignored.
func (s *Searcher) Search(ctx context.Context, d Dataset, seqs []string) (map[string]Identity, error) {
	return s.SearchBatched(ctx, d, seqs, s.BatchSize)
}

// SearchBatched is Search with batches of at most size queries (0: the
// searcher's BatchSize).
func (s *Searcher) SearchBatched(ctx context.Context, d Dataset, seqs []string, size int) (map[string]Identity, error) {
	dir, err := s.BuildDir(ctx, d)
	if err != nil {
		return nil, err
	}
	b := s.build(dir)
	out := make(map[string]Identity, len(seqs))
	var missing []string
	b.mu.Lock()
	if err := b.refresh(); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	for _, q := range seqs {
		if q == "" {
			continue
		}
		if _, seen := out[q]; seen {
			continue
		}
		if id, ok := b.results[sha256.Sum256([]byte(q))]; ok {
			out[q] = id
		} else {
			out[q] = Identity{}
			missing = append(missing, q)
		}
	}
	b.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	if size <= 0 {
		size = s.BatchSize
	}
	if size <= 0 {
		size = 2000
	}
	for start := 0; start < len(missing); start += size {
		batch := missing[start:min(start+size, len(missing))]
		res, err := s.searchBatch(ctx, d, dir, batch)
		if err != nil {
			return nil, err
		}
		if err := b.append(res); err != nil {
			return nil, err
		}
		for q, id := range res {
			out[q] = id
		}
	}
	return out, nil
}

// Cached returns what the cache already holds for seqs, without searching.
func (s *Searcher) Cached(ctx context.Context, d Dataset, seqs []string) (map[string]Identity, error) {
	dir, err := s.BuildDir(ctx, d)
	if err != nil {
		return nil, err
	}
	b := s.build(dir)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refresh(); err != nil {
		return nil, err
	}
	out := map[string]Identity{}
	for _, q := range seqs {
		if id, ok := b.results[sha256.Sum256([]byte(q))]; ok {
			out[q] = id
		}
	}
	return out, nil
}

func (s *Searcher) build(dir string) *build {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.builds == nil {
		s.builds = map[string]*build{}
	}
	b, ok := s.builds[dir]
	if !ok {
		b = &build{dir: dir, results: map[[32]byte]Identity{}}
		s.builds[dir] = b
	}
	return b
}

// searchBatch runs one mmseqs search of queries against the build in dir.
func (s *Searcher) searchBatch(ctx context.Context, d Dataset, dir string, queries []string) (map[string]Identity, error) {
	work, err := os.MkdirTemp(dir, ".search-*")
	if err != nil {
		return nil, fmt.Errorf("similarity search: %w", err)
	}
	defer os.RemoveAll(work)
	var fa bytes.Buffer
	for i, q := range queries {
		fmt.Fprintf(&fa, ">q%d\n%s\n", i, q)
	}
	qpath := filepath.Join(work, "query.fasta")
	if err := os.WriteFile(qpath, fa.Bytes(), 0o644); err != nil {
		return nil, fmt.Errorf("similarity search: %w", err)
	}
	m8 := filepath.Join(work, "result.m8")
	args := []string{"easy-search", qpath, filepath.Join(dir, "db", "targetDB"), m8, filepath.Join(work, "tmp")}
	args = append(args, searchArgs...)
	args = append(args, "--format-output", "query,target,pident", "-v", "1")
	args = append(args, s.threadArgs()...)
	start := time.Now()
	if err := s.run(ctx, args...); err != nil {
		return nil, fmt.Errorf("similarity search %s: %w", d.Label, err)
	}
	f, err := os.Open(m8)
	if err != nil {
		return nil, fmt.Errorf("similarity search %s: %w", d.Label, err)
	}
	defer f.Close()
	sums := make([]float64, len(queries))
	res := make([]Identity, len(queries))
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) < 3 || !strings.HasPrefix(fields[0], "q") {
			continue
		}
		i, err := strconv.Atoi(fields[0][1:])
		if err != nil || i < 0 || i >= len(queries) {
			continue
		}
		p, err := strconv.ParseFloat(fields[2], 64)
		if err != nil {
			continue
		}
		r := &res[i]
		if r.Hits == 0 || p > r.Max {
			r.Max = p
		}
		r.Hits++
		sums[i] += p
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read similarity result %s: %w", d.Label, err)
	}
	out := make(map[string]Identity, len(queries))
	for i, q := range queries {
		if res[i].Hits > 0 {
			res[i].Mean = sums[i] / float64(res[i].Hits)
		}
		out[q] = res[i]
	}
	s.log().Info("similarity search", "event", "similarity.search", "dataset", d.Label, "queries", len(queries), "seconds", time.Since(start).Seconds())
	return out, nil
}

// resultsFile is the build's append-only cache: one line per sequence,
// "<sha256 hex>\t<max>\t<mean>\t<hits>\n".
func (b *build) resultsFile() string { return filepath.Join(b.dir, "results.tsv") }

// refresh reads what other processes appended since the last read. Only
// whole lines count: a torn last line (a crash mid-append) is skipped.
func (b *build) refresh() error {
	f, err := os.Open(b.resultsFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("similarity cache: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(b.offset, io.SeekStart); err != nil {
		return fmt.Errorf("similarity cache: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("similarity cache: %w", err)
	}
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		return nil
	}
	for _, line := range bytes.Split(data[:end], []byte{'\n'}) {
		key, id, ok := parseLine(line)
		if ok {
			b.results[key] = id
		}
	}
	b.offset += int64(end + 1)
	return nil
}

func parseLine(line []byte) ([32]byte, Identity, bool) {
	var key [32]byte
	f := strings.Split(string(line), "\t")
	if len(f) != 4 || len(f[0]) != 64 {
		return key, Identity{}, false
	}
	if _, err := hex.Decode(key[:], []byte(f[0])); err != nil {
		return key, Identity{}, false
	}
	mx, err1 := strconv.ParseFloat(f[1], 64)
	mean, err2 := strconv.ParseFloat(f[2], 64)
	hits, err3 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil || err3 != nil {
		return key, Identity{}, false
	}
	return key, Identity{Max: mx, Mean: mean, Hits: hits}, true
}

// append adds res to the cache file under the build's lock, in one write
// followed by fsync; a torn line left by a crash is closed off first.
func (b *build) append(res map[string]Identity) error {
	var buf bytes.Buffer
	for q, id := range res {
		sum := sha256.Sum256([]byte(q))
		fmt.Fprintf(&buf, "%s\t%s\t%s\t%d\n", hex.EncodeToString(sum[:]),
			strconv.FormatFloat(id.Max, 'g', -1, 64), strconv.FormatFloat(id.Mean, 'g', -1, 64), id.Hits)
	}
	// The append is short; a background context keeps a cancelled caller
	// from losing results it already paid for.
	unlock, err := lockFile(context.Background(), filepath.Join(b.dir, "results.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	f, err := os.OpenFile(b.resultsFile(), os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("similarity cache: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, fi.Size()-1); err == nil && last[0] != '\n' {
			buf = *bytes.NewBuffer(append([]byte{'\n'}, buf.Bytes()...))
		}
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("similarity cache: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("similarity cache: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for q, id := range res {
		b.results[sha256.Sum256([]byte(q))] = id
	}
	return nil
}

// Round2 rounds v to 2 decimals, as the result columns show identities.
func Round2(v float64) float64 { return math.Round(v*100) / 100 }
