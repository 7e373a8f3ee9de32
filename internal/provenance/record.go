package provenance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/mediaroot"
)

// RecordName is the file beside a family's artefacts that records the
// family's fingerprint. Its name is hidden, so planners and listings never
// take it for an artefact.
const RecordName = ".fingerprint.json"

// lockName serialises the check-and-record of concurrent writers (kinflow
// processes on any host: flock over NFS is arbitrated by the server).
const lockName = ".fingerprint.lock"

// Recorded is the content of a family's RecordName.
type Recorded struct {
	// ID is Fingerprint.ID(), stored for readers that only compare ids.
	ID          string      `json:"id"`
	Fingerprint Fingerprint `json:"fingerprint"`
	RecordedAt  time.Time   `json:"recorded_at"`
	// SyntheticFiles says the folder may also hold synthetic files (listed
	// with `"synthetic": true` in its manifest.json) beside files made under
	// Fingerprint: a planner of a real engine then reads the manifest.
	SyntheticFiles bool `json:"synthetic_files,omitempty"`
	// Unverified says the folder held artefacts of unknown origin (the
	// reference deployment's, written before any record) when this record
	// was made; `kinflow cache adopt` clears it after a verify.
	Unverified bool `json:"unverified,omitempty"`
	// Adopted is when `kinflow cache adopt` took the files under
	// Fingerprint (after a verify of a sample passed).
	Adopted *time.Time `json:"adopted,omitempty"`
}

// AllSynthetic reports whether every file recorded under r is synthetic.
func (r *Recorded) AllSynthetic() bool { return r != nil && r.Fingerprint.Synthetic }

// ReadRecorded returns dir's record, or nil when it has none (a family
// never written by kinflow, or a missing folder). An unreadable record is an
// error: a planner or a writer must not guess.
func ReadRecorded(dir string) (*Recorded, error) {
	b, err := os.ReadFile(filepath.Join(dir, RecordName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read fingerprint record of %s: %w", dir, err)
	}
	var r Recorded
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("fingerprint record %s is not valid JSON: %w", filepath.Join(dir, RecordName), err)
	}
	if r.ID == "" {
		r.ID = r.Fingerprint.ID()
	}
	return &r, nil
}

// Write replaces dir's record with r atomically (fsutil), creating dir.
func Write(dir string, r *Recorded) error {
	if err := mediaroot.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	r.ID = r.Fingerprint.ID()
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode fingerprint record: %w", err)
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, RecordName), append(b, '\n'), 0o644)
}

// Verdict is how a writer's fingerprint compares with a family's record.
type Verdict int

// Verdicts of Compare.
const (
	// Unrecorded: the family has no record yet.
	Unrecorded Verdict = iota
	// Equal: same fingerprint.
	Equal
	// SyntheticRecorded: the record is synthetic and the writer is real:
	// never refused; the real writer's fingerprint replaces the record and
	// the synthetic files are replaced as they are rewritten.
	SyntheticRecorded
	// SyntheticWriter: the writer is synthetic and the record real: its
	// files are flagged synthetic per file (manifest) and never consumed by
	// a real engine.
	SyntheticWriter
	// Mismatch: another real model made the family's files: refused.
	Mismatch
)

func (v Verdict) String() string {
	return [...]string{"unrecorded", "equal", "synthetic-recorded", "synthetic-writer", "mismatch"}[v]
}

// Compare compares fp with the record rec (nil: none).
func Compare(rec *Recorded, fp Fingerprint) Verdict {
	switch {
	case rec == nil:
		return Unrecorded
	case rec.ID == fp.ID():
		return Equal
	case rec.Fingerprint.Synthetic && !fp.Synthetic:
		return SyntheticRecorded
	case fp.Synthetic:
		return SyntheticWriter
	}
	return Mismatch
}

// Check reads dir's record and compares fp with it.
func Check(dir string, fp Fingerprint) (Verdict, *Recorded, error) {
	rec, err := ReadRecorded(dir)
	if err != nil {
		return Mismatch, nil, err
	}
	return Compare(rec, fp), rec, nil
}

// MismatchError is a writer refused by a family made by another model. Its
// message is one line naming the family, both fingerprint ids and the
// commands that resolve it.
type MismatchError struct {
	Family   string
	Recorded string
	Writer   string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("family %s holds files of fingerprint %s but this host's model is %s: refusing to mix them; run `kinflow cache purge --family %s` to recompute with this model, or `kinflow cache adopt --family %s` after checking that they agree",
		e.Family, e.Recorded, e.Writer, e.Family, e.Family)
}

// Admit is the check before a write: it compares fp (the writer's
// fingerprint for the family; ForFamily is applied here) with dir's record
// and, under the family's lock, records it when the family has none yet,
// takes over a synthetic record, or notes that synthetic files are added. A
// different real model is refused with a *MismatchError.
func Admit(dir, family string, fp Fingerprint) (Verdict, error) {
	return AdmitWith(dir, family, fp, nil)
}

// AdmitWith is Admit with a hook run under the family's lock just before a
// real writer's record replaces a synthetic one (SyntheticRecorded): the
// record then stops vouching for every file, so the hook flags per file
// (manifest) the synthetic files the manifest does not list yet. An error
// of the hook leaves the synthetic record in place.
func AdmitWith(dir, family string, fp Fingerprint, onTakeover func() error) (Verdict, error) {
	fp = fp.ForFamily(family)
	// Fast path: the common case (equal) needs no lock and no write.
	rec, err := ReadRecorded(dir)
	if err != nil {
		return Mismatch, err
	}
	v := Compare(rec, fp)
	if v == Equal || (v == SyntheticWriter && rec.SyntheticFiles) {
		return v, nil
	}
	if v == Mismatch {
		return v, &MismatchError{Family: family, Recorded: rec.ID, Writer: fp.ID()}
	}
	if err := mediaroot.MkdirAll(dir, 0o755); err != nil {
		return v, fmt.Errorf("create %s: %w", dir, err)
	}
	unlock, err := lock(filepath.Join(dir, lockName))
	if err != nil {
		return v, err
	}
	defer unlock()
	if rec, err = ReadRecorded(dir); err != nil {
		return Mismatch, err
	}
	v = Compare(rec, fp)
	now := time.Now().UTC()
	switch v {
	case Equal:
		return v, nil
	case Mismatch:
		return v, &MismatchError{Family: family, Recorded: rec.ID, Writer: fp.ID()}
	case Unrecorded:
		n, err := CountArtefacts(dir)
		if err != nil {
			return v, err
		}
		// Files already there may include synthetic ones flagged only in
		// the manifest (written before records existed): readers must keep
		// reading it, or they would take those for this model's.
		return v, Write(dir, &Recorded{Fingerprint: fp, RecordedAt: now, Unverified: n > 0,
			SyntheticFiles: n > 0 && !fp.Synthetic && manifestMentionsSynthetic(dir)})
	case SyntheticRecorded:
		if onTakeover != nil {
			if err := onTakeover(); err != nil {
				return v, err
			}
		}
		return v, Write(dir, &Recorded{Fingerprint: fp, RecordedAt: now, SyntheticFiles: true, Unverified: rec.Unverified})
	default: // SyntheticWriter
		if rec.SyntheticFiles {
			return v, nil
		}
		rec.SyntheticFiles = true
		return v, Write(dir, rec)
	}
}

// manifestMentionsSynthetic reports whether dir's manifest.json flags any
// file synthetic (a byte search: a flag's key appears only in such entries).
func manifestMentionsSynthetic(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	return err == nil && bytes.Contains(b, []byte(`"synthetic"`))
}

// CountArtefacts counts the artefact files in dir: regular files whose name
// is neither hidden (records, locks, temp files) nor manifest.json.
func CountArtefacts(dir string) (int, error) {
	n := 0
	err := eachArtefact(dir, func(fs.DirEntry) bool { n++; return true })
	return n, err
}

// eachArtefact calls fn with every artefact entry of dir until it returns
// false; a missing dir has none.
func eachArtefact(dir string, fn func(fs.DirEntry) bool) error {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	defer f.Close()
	for {
		ents, err := f.ReadDir(4096)
		for _, e := range ents {
			name := e.Name()
			if strings.HasPrefix(name, ".") || name == "manifest.json" || !e.Type().IsRegular() {
				continue
			}
			if !fn(e) {
				return nil
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(ents) == 0) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", dir, err)
		}
	}
}

// LockFamily takes the family folder's record lock, the one Admit holds
// while it checks and records: operator commands that rewrite the record or
// remove files (kinflow cache purge, adopt) hold it too, so a writer's
// check-and-record never interleaves with them. A folder that does not exist
// has nothing to lock.
func LockFamily(dir string) (func(), error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return func() {}, nil
	}
	return lock(filepath.Join(dir, lockName))
}

// lock takes an exclusive flock on path (created if absent).
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
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
