package mediaroot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// open opens path as a test's root, closed at the test's end.
func open(t *testing.T, path string, o Options) *Root {
	t.Helper()
	r, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// away renames path aside and returns a function that puts it back.
func away(t *testing.T, path string) (back func()) {
	t.Helper()
	aside := path + ".aside"
	if err := os.Rename(path, aside); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := os.Rename(aside, path); err != nil {
			t.Fatal(err)
		}
	}
}

func wantKind(t *testing.T, err error, kind string) {
	t.Helper()
	if !errors.Is(err, ErrUnavailable) || Kind(err) != kind || !Unavailable(err) {
		t.Fatalf("check: %v (kind %q), want an unavailable root of kind %q", err, Kind(err), kind)
	}
}

// TestFreshRootGetsItsMarker: an existing root with no kinflow data gets a
// marker at the first Open, with a random id and its creation time, and
// checks ok; a second process's Open (here: a second Root on the same
// folder) adopts the same id instead of writing another.
func TestFreshRootGetsItsMarker(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "pseq2sites"), 0o755); err != nil { // operator's inputs are not kinflow data
		t.Fatal(err)
	}
	before := time.Now().UTC().Add(-time.Second)
	r := open(t, root, Options{})
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	m, err := ReadMarker(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.ID) != 32 || m.ID != r.ID() || m.Created.Before(before) || m.Created.After(time.Now().UTC()) {
		t.Fatalf("marker %+v, root id %q", m, r.ID())
	}
	other := &Root{path: root, every: CheckEvery}
	if err := other.CheckNow(); err != nil || other.ID() != m.ID {
		t.Fatalf("a second process: %v, id %q want %q", err, other.ID(), m.ID)
	}
	if again, _ := ReadMarker(root); again != m {
		t.Fatalf("the marker changed: %+v, was %+v", again, m)
	}
}

// TestMarkerMissingDifferentAndBack: the root renamed away fails the check
// (missing), as does an empty folder or another marked root put at its
// path (missing, foreign); once the real root is back the check passes
// again, with no restart.
func TestMarkerMissingDifferentAndBack(t *testing.T) {
	root := filepath.Join(t.TempDir(), "media")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	r := open(t, root, Options{})
	if err := r.CheckNow(); err != nil {
		t.Fatal(err)
	}
	back := away(t, root)
	wantKind(t, r.CheckNow(), KindMissing)
	// An empty folder at the path (a mount point without its mount) is
	// not adopted: the process has an identity already.
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	wantKind(t, r.CheckNow(), KindMissing)
	if _, err := os.Stat(filepath.Join(root, MarkerName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a marker was written into the empty folder: %v", err)
	}
	// Another media root at the path.
	if _, err := create(root); err != nil {
		t.Fatal(err)
	}
	wantKind(t, r.CheckNow(), KindForeign)
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	back()
	if err := r.CheckNow(); err != nil {
		t.Fatalf("the root is back: %v", err)
	}
	// An unreadable marker.
	if err := os.Chmod(filepath.Join(root, MarkerName), 0o644); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(filepath.Join(root, MarkerName))
	if err := os.WriteFile(filepath.Join(root, MarkerName), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantKind(t, r.CheckNow(), KindUnreadable)
	if err := os.WriteFile(filepath.Join(root, MarkerName), good, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.CheckNow(); err != nil {
		t.Fatal(err)
	}
}

// TestCheckIsReusedForItsInterval: Check reuses its outcome for the
// interval (one marker read a second), CheckNow reads anew.
func TestCheckIsReusedForItsInterval(t *testing.T) {
	root := t.TempDir()
	r := open(t, root, Options{})
	r.every = time.Hour
	if err := r.CheckNow(); err != nil {
		t.Fatal(err)
	}
	back := away(t, root)
	if err := r.Check(); err != nil {
		t.Fatalf("a check within the interval read the disk: %v", err)
	}
	wantKind(t, r.CheckNow(), KindMissing)
	back()
	wantKind(t, r.Check(), KindMissing) // the failure is reused as well
	if err := r.CheckNow(); err != nil {
		t.Fatal(err)
	}
	if CheckEvery != time.Second {
		t.Fatalf("CheckEvery %v", CheckEvery)
	}
}

// TestMkdirAllRefusesToRecreateTheRoot: while the root is away, MkdirAll of
// a job's folder, of jobs/, of sequence_info/<family>/ and of the root
// itself fails with ErrUnavailable and creates nothing at the old path;
// once it is back, MkdirAll creates the folders below it.
func TestMkdirAllRefusesToRecreateTheRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "media")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	r := open(t, root, Options{})
	if err := MkdirAll(filepath.Join(root, "jobs", "j1", "work", "stage-0"), 0o755); err != nil {
		t.Fatal(err)
	}
	back := away(t, root)
	_ = r.CheckNow()
	for _, d := range []string{
		filepath.Join(root, "jobs", "j2"),
		filepath.Join(root, "jobs"),
		filepath.Join(root, "sequence_info", "prot_t5_last", "mean_vecs"),
		filepath.Join(root, "gpu_jobs", "g1"),
		root,
	} {
		if err := MkdirAll(d, 0o755); !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), root) {
			t.Fatalf("MkdirAll(%s) while away: %v", d, err)
		}
	}
	if _, err := os.Lstat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the root was recreated: %v", err)
	}
	back()
	_ = r.CheckNow()
	fam := filepath.Join(root, "sequence_info", "prot_t5_last", "mean_vecs")
	if err := MkdirAll(fam, 0o755); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(fam); err != nil || !fi.IsDir() {
		t.Fatalf("family folder: %v", err)
	}
	// A path under no open root is os.MkdirAll's.
	other := filepath.Join(t.TempDir(), "a", "b")
	if err := MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestMkdirAllNeverCreatesTheRootInTheCheckWindow: with a check reused
// from before the root went away, MkdirAll still does not recreate it: it
// creates folders one at a time below the root, and a vanished root fails
// the first one.
func TestMkdirAllNeverCreatesTheRootInTheCheckWindow(t *testing.T) {
	root := filepath.Join(t.TempDir(), "media")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	r := open(t, root, Options{})
	r.every = time.Hour
	if err := r.CheckNow(); err != nil {
		t.Fatal(err)
	}
	away(t, root)
	if err := MkdirAll(filepath.Join(root, "jobs", "j3"), 0o755); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("MkdirAll with a stale check: %v", err)
	}
	if _, err := os.Lstat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the root was recreated: %v", err)
	}
}

// TestMissingRootIsNotCreated: a process started before its root exists
// creates nothing and reports it missing; once an operator makes the
// folder (empty), the next check marks and adopts it. `kinflow dev`
// (CreateRoot) creates a missing root and its marker at start, and marks
// an unmarked one whatever it holds.
func TestMissingRootIsNotCreated(t *testing.T) {
	root := filepath.Join(t.TempDir(), "media")
	r := open(t, root, Options{})
	wantKind(t, r.Check(), KindMissing)
	if err := MkdirAll(filepath.Join(root, "jobs"), 0o755); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("MkdirAll under a missing root: %v", err)
	}
	if _, err := os.Lstat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the root was created: %v", err)
	}
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := r.CheckNow(); err != nil || r.ID() == "" {
		t.Fatalf("a root made later: %v, id %q", err, r.ID())
	}

	dev := filepath.Join(t.TempDir(), "fresh", "media")
	d := open(t, dev, Options{CreateRoot: true})
	if err := d.Check(); err != nil {
		t.Fatal(err)
	}
	if m, err := ReadMarker(dev); err != nil || m.ID != d.ID() {
		t.Fatalf("dev root marker %+v: %v", m, err)
	}
	// An old clone's ./media: data, no marker; dev marks it at start.
	old := t.TempDir()
	if err := os.Mkdir(filepath.Join(old, "jobs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if o := open(t, old, Options{CreateRoot: true}); o.Check() != nil || o.ID() == "" {
		t.Fatalf("dev on an unmarked root with data: %v", o.Check())
	}
	// CreateRoot is for the start only: gone later, it is not recreated.
	away(t, dev)
	if err := MkdirAll(filepath.Join(dev, "jobs"), 0o755); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("MkdirAll under dev's vanished root: %v", err)
	}
	if _, err := os.Lstat(dev); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dev's root was recreated: %v", err)
	}
}

// TestRootWithDataButNoMarkerNeedsInit: a root holding kinflow data (here
// jobs/) and no marker is not marked by a process (it may be a tree a
// process of an older version recreated); Init marks it, and a process
// that found it unmarked adopts the marker at its next check. Init refuses
// a marked root and a missing one.
func TestRootWithDataButNoMarkerNeedsInit(t *testing.T) {
	for _, d := range dataDirs {
		t.Run(d, func(t *testing.T) {
			root := t.TempDir()
			if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
			r := open(t, root, Options{})
			wantKind(t, r.Check(), KindUnmarked)
			if _, err := os.Stat(filepath.Join(root, MarkerName)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a process marked a root with data: %v", err)
			}
			m, err := Init(root)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.CheckNow(); err != nil || r.ID() != m.ID {
				t.Fatalf("after init: %v, id %q want %q", err, r.ID(), m.ID)
			}
			if _, err := Init(root); err == nil || !strings.Contains(err.Error(), "already marked") {
				t.Fatalf("a second init: %v", err)
			}
		})
	}
	if _, err := Init(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("init of a missing root succeeded")
	}
}

// TestConcurrentCreatorsAgree: processes that find a fresh root at once
// all end with the one marker that won.
func TestConcurrentCreatorsAgree(t *testing.T) {
	root := t.TempDir()
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &Root{path: root, every: CheckEvery}
			if err := r.CheckNow(); err != nil {
				t.Error(err)
			}
			ids[i] = r.ID()
		}()
	}
	wg.Wait()
	m, err := ReadMarker(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if id != m.ID {
			t.Fatalf("ids %v, marker %s", ids, m.ID)
		}
	}
	es, _ := os.ReadDir(root)
	if len(es) != 1 {
		t.Fatalf("the root holds %d entries, want the marker only", len(es))
	}
}

// TestUnavailableText: the error's text is found where only the text
// survives (a Temporal failure), and names no path.
func TestUnavailableText(t *testing.T) {
	e := &Error{Kind: KindMissing, Detail: "x", Err: &os.PathError{Op: "stat", Path: "/secret/media", Err: os.ErrNotExist}}
	if strings.Contains(e.Error(), "/secret") || !UnavailableText("step failed: "+strings.ToUpper(e.Error())) || Unavailable(errors.New("other")) || Unavailable(nil) {
		t.Fatalf("text %q", e.Error())
	}
}

// TestExpectIDHoldsTheRootToTheHostsIdentity: a step server opened with
// the GPU host's id checks the marker against it: a fresh root is not
// marked by it (missing), another root's marker is foreign, the host's
// passes.
func TestExpectIDHoldsTheRootToTheHostsIdentity(t *testing.T) {
	root := t.TempDir()
	r := open(t, root, Options{ExpectID: "00112233445566778899aabbccddeeff"})
	wantKind(t, r.Check(), KindMissing)
	if _, err := os.Stat(filepath.Join(root, MarkerName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a step server marked the root: %v", err)
	}
	m, err := create(root)
	if err != nil {
		t.Fatal(err)
	}
	wantKind(t, r.CheckNow(), KindForeign)
	r.Close()
	s := open(t, root, Options{ExpectID: m.ID})
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}
