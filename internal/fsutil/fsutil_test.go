package fsutil

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// entries lists dir's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestTempPattern(t *testing.T) {
	for final, want := range map[string]string{
		"/c/sid1.npy":      ".sid1.*.npy",
		"/c/a.b.pt":        ".a.b.*.pt",
		"manifest.json":    ".manifest.*.json",
		"/j/output":        ".output.*",
		"/j/x.y*z":         ".x.y*z.*",
		"/j/input.csv":     ".input.*.csv",
		"rel/dir/plan.txt": ".plan.*.txt",
	} {
		if got := TempPattern(final); got != want {
			t.Errorf("TempPattern(%q) = %q, want %q", final, got, want)
		}
	}
}

func TestWriteTempIsHiddenUntilCommit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "sub")
	final := filepath.Join(dir, "sid.7.npy")
	tmp, err := WriteTemp(final, 0o600, false, func(w io.Writer) error {
		_, err := io.WriteString(w, "data")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if tmp.Final != final || filepath.Dir(tmp.Path) != dir {
		t.Fatalf("temp %+v not beside %s", tmp, final)
	}
	// The cache write protocol's temp name: `.<sid>.<random><suffix>` in the
	// same folder.
	if !regexp.MustCompile(`^\.sid\.7\.[0-9]+\.npy$`).MatchString(filepath.Base(tmp.Path)) {
		t.Errorf("temp name %q is not .<stem>.<random><ext>", filepath.Base(tmp.Path))
	}
	if _, err := os.Stat(final); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("final exists before Commit: %v", err)
	}
	if err := tmp.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, dir); len(got) != 1 || got[0] != "sid.7.npy" {
		t.Fatalf("after Commit the folder holds %v", got)
	}
	st, err := os.Stat(final)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if b, _ := os.ReadFile(final); string(b) != "data" {
		t.Errorf("content %q", b)
	}
}

func TestDiscardLeavesTheOldFile(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, "f.txt")
	if err := WriteFileAtomic(final, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp, err := WriteTemp(final, 0o644, true, func(w io.Writer) error {
		_, err := io.WriteString(w, "new")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	tmp.Discard()
	if got := entries(t, dir); len(got) != 1 || got[0] != "f.txt" {
		t.Fatalf("after Discard the folder holds %v", got)
	}
	if b, _ := os.ReadFile(final); string(b) != "old" {
		t.Errorf("content %q, want the old one", b)
	}
}

func TestWriteAtomicFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, "out.csv")
	if err := WriteFileAtomic(final, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteAtomic(final, 0o644, func(w io.Writer) error {
		_, _ = io.WriteString(w, "partial")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Fatalf("a failed write left %v", got)
	}
	if b, _ := os.ReadFile(final); string(b) != "old" {
		t.Errorf("content %q, want the old one", b)
	}
}

func TestWriteFileAtomicReplaces(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, "a", "b.json")
	for _, v := range []map[string]int{{"n": 1}, {"n": 2}} {
		if err := WriteJSONAtomic(final, v); err != nil {
			t.Fatal(err)
		}
	}
	var got map[string]int
	if err := ReadJSON(final, &got); err != nil {
		t.Fatal(err)
	}
	if got["n"] != 2 {
		t.Errorf("got %v", got)
	}
	if names := entries(t, filepath.Dir(final)); len(names) != 1 {
		t.Errorf("folder holds %v", names)
	}
}

func TestCommitIntoMissingFolderFails(t *testing.T) {
	dir := t.TempDir()
	tmp, err := WriteTemp(filepath.Join(dir, "x.npy"), 0o644, false, func(io.Writer) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	tmp.Final = filepath.Join(dir, "gone", "x.npy")
	if err := tmp.Commit(); err == nil || !strings.Contains(err.Error(), "rename") {
		t.Fatalf("Commit into a missing folder: %v", err)
	}
	if got := entries(t, dir); len(got) != 0 {
		t.Errorf("a failed Commit left %v", got)
	}
}

func TestSyncTempsThenCommit(t *testing.T) {
	dir := t.TempDir()
	var ts []Temp
	for i := range 40 {
		final := filepath.Join(dir, fmt.Sprintf("f%02d.npy", i))
		tmp, err := WriteTemp(final, 0o644, false, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "file %d", i)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, tmp)
	}
	if err := SyncTemps(ts); err != nil {
		t.Fatal(err)
	}
	for i, tmp := range ts {
		if err := tmp.Commit(); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(tmp.Final)
		if err != nil || string(data) != fmt.Sprintf("file %d", i) {
			t.Fatalf("%s: %q %v", tmp.Final, data, err)
		}
	}
	// A temp file that is gone is an error naming the final file, not a
	// silent success.
	gone := Temp{Path: filepath.Join(dir, ".gone.123.npy"), Final: filepath.Join(dir, "gone.npy")}
	if err := SyncTemps([]Temp{gone}); err == nil || !strings.Contains(err.Error(), "gone.npy") {
		t.Fatalf("missing temp file: %v", err)
	}
}
