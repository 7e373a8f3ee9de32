// Package fsutil writes files so that a reader never sees a partial one. It
// is kinflow's one atomic-write implementation; every file another process
// may read while it is written (job files, cache artefacts and their
// manifests, the plan and contract files) goes through it.
//
// The protocol is the cache write protocol that kinflow shares with the
// reference deployment's GPU workers (docs/embedding.md, "Writing
// artefacts"): the data
// goes to a hidden temp file `.<stem>.<random><ext>` in the final file's
// folder, is made durable (an fsync of the file, or of each file of a batch
// at once, see SyncTemps), and is renamed over the final name. Readers, the
// progress tracker and the planners ignore hidden names, and a watcher sees
// one moved-to event per file.
package fsutil

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kinflow/kinflow/internal/mediaroot"
)

// Temp is a file written under its hidden temp name and not yet renamed into
// place. Commit renames it; Discard removes it.
type Temp struct {
	// Path is the hidden temp file.
	Path string
	// Final is the name Commit gives it.
	Final string
}

// Commit renames the temp file over its final name (atomic within a file
// system). On failure the temp file is removed.
func (t Temp) Commit() error {
	if err := os.Rename(t.Path, t.Final); err != nil {
		_ = os.Remove(t.Path)
		return fmt.Errorf("rename into %s: %w", t.Final, err)
	}
	return nil
}

// Discard removes the temp file; the final file is left as it was.
func (t Temp) Discard() { _ = os.Remove(t.Path) }

// TempPattern is the os.CreateTemp pattern of final's hidden temp name,
// `.<stem>.*<ext>` (`.<sid>.<random><suffix>` for an artefact
// `<sid><suffix>`, the name the reference's GPU workers use too).
func TempPattern(final string) string {
	base := filepath.Base(final)
	ext := filepath.Ext(base)
	if strings.Contains(ext, "*") {
		// os.CreateTemp puts the random part at the last '*'.
		ext = ""
	}
	return "." + strings.TrimSuffix(base, ext) + ".*" + ext
}

// WriteTemp creates final's folder if needed (mediaroot.MkdirAll: under
// the media root only while it is there with its identity, never the root
// itself) and writes a hidden temp file beside final with write, then sets
// perm. With sync set the file is fsynced;
// a batch writer passes false and calls SyncTemps once before committing its
// files. On error nothing is left behind.
func WriteTemp(final string, perm os.FileMode, sync bool, write func(io.Writer) error) (Temp, error) {
	dir := filepath.Dir(final)
	if err := mediaroot.MkdirAll(dir, 0o755); err != nil {
		return Temp{}, fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, TempPattern(final))
	if err != nil {
		return Temp{}, fmt.Errorf("write %s: %w", final, err)
	}
	tmp := f.Name()
	fail := func(what string, err error) (Temp, error) {
		_ = f.Close()
		_ = os.Remove(tmp)
		return Temp{}, fmt.Errorf("%s %s: %w", what, final, err)
	}
	if err := write(f); err != nil {
		return fail("write", err)
	}
	if err := f.Chmod(perm); err != nil {
		return fail("write", err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			return fail("sync", err)
		}
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return Temp{}, fmt.Errorf("write %s: %w", final, err)
	}
	return Temp{Path: tmp, Final: final}, nil
}

// WriteAtomic writes path with write through a hidden, fsynced temp file
// renamed over path: a crash leaves either the old file or the new one,
// never a torn write.
func WriteAtomic(path string, perm os.FileMode, write func(io.Writer) error) error {
	t, err := WriteTemp(path, perm, true, write)
	if err != nil {
		return err
	}
	return t.Commit()
}

// WriteFileAtomic writes data to path with WriteAtomic.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return WriteAtomic(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteJSONAtomic encodes v as JSON and writes it with WriteFileAtomic.
func WriteJSONAtomic(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return WriteFileAtomic(path, data, 0o644)
}

// syncParallel is how many temp files SyncTemps flushes at once: the file
// system folds concurrent fsyncs into shared journal commits.
const syncParallel = 16

// SyncTemps makes every temp file of ts durable (an fsync each, up to
// syncParallel at once) before the caller commits them. Its cost grows with
// the batch alone, where a syncfs(2)'s (what batches used before) grows
// with everything any process wrote on the file system: under many
// concurrent jobs (or a busy neighbour) it took 0.5–1.7 s for a batch of
// three 4 KiB files.
func SyncTemps(ts []Temp) error {
	if len(ts) == 0 {
		return nil
	}
	errs := make([]error, len(ts))
	sem := make(chan struct{}, syncParallel)
	var wg sync.WaitGroup
	for i, t := range ts {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f, err := os.OpenFile(t.Path, os.O_WRONLY, 0)
			if err != nil {
				errs[i] = fmt.Errorf("sync %s: %w", t.Final, err)
				return
			}
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				errs[i] = fmt.Errorf("sync %s: %w", t.Final, err)
			}
			_ = f.Close()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// ReadJSON decodes the JSON file at path into v.
func ReadJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}
