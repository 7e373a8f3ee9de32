package fsutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kinflow/kinflow/internal/mediaroot"
)

// TestUnwritable: the errors of a file system that cannot be written at
// all are told from the others, through *fs.PathError and fmt wrapping as
// WriteAtomic returns them; lack of space is not one of them (NoSpace).
func TestUnwritable(t *testing.T) {
	wrap := func(op string, e error) error {
		return fmt.Errorf("write input jobs/x/input.csv: %w", fmt.Errorf("create /media/jobs/x: %w", &fs.PathError{Op: op, Path: "/media/jobs/x", Err: e}))
	}
	for _, e := range []syscall.Errno{syscall.EROFS, syscall.EACCES, syscall.EPERM, syscall.EIO, syscall.ESTALE, syscall.ENOTDIR} {
		if !Unwritable(wrap("mkdir", e)) {
			t.Errorf("%v: not called unwritable", e)
		}
	}
	for _, err := range []error{nil, errors.New("read-only file system"), wrap("open", syscall.ENOSPC), wrap("open", syscall.EDQUOT), wrap("open", syscall.ENOENT), wrap("open", syscall.EINVAL)} {
		if Unwritable(err) {
			t.Errorf("%v: called unwritable", err)
		}
	}
	// A real one: a folder on the path that is a file.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "jobs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := WriteFileAtomic(filepath.Join(dir, "jobs", "x", "input.csv"), []byte("a\n"), 0o644)
	if !Unwritable(err) || NoSpace(err) {
		t.Fatalf("a write under a file: %v", err)
	}
}

// TestWriteUnderAbsentMediaRoot: a write under an open media root that
// was renamed away fails as Unwritable (so the api answers 503), names no
// path in mediaroot's part of the error, and recreates nothing at the old
// path; once the root is back the same write succeeds.
func TestWriteUnderAbsentMediaRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "media")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := mediaroot.Open(root, mediaroot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := os.Rename(root, root+".aside"); err != nil {
		t.Fatal(err)
	}
	_ = r.CheckNow()
	final := filepath.Join(root, "jobs", "x", "input.csv")
	err = WriteFileAtomic(final, []byte("a\n"), 0o644)
	if !Unwritable(err) || NoSpace(err) || !errors.Is(err, mediaroot.ErrUnavailable) {
		t.Fatalf("a write under the absent root: %v", err)
	}
	if _, err := os.Lstat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the root was recreated: %v", err)
	}
	if err := os.Rename(root+".aside", root); err != nil {
		t.Fatal(err)
	}
	_ = r.CheckNow()
	if err := WriteFileAtomic(final, []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
