package embedding

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/kinflow/kinflow/internal/mediaroot"
)

// The integrity check: the cache is only worth what its files are right. Every kinflow writer records each file's size, modification
// time, inode change time, inode number and SHA-256 in its family's
// manifest (Commit). Before a stage's engine runs, the planner compares
// every persistent file the stage will read with its record: a stat is
// enough while all four match. The inode change time is what makes the stat
// hard to forge: a write in place or a utime that sets the modification
// time back both move it to now, and only the kernel sets it. A file whose
// stat differs is read and hashed: the same contents are recorded with the
// new stat, other contents are set aside. A file with no hash recorded (a
// damaged or deleted manifest, a foreign writer, the reference's cache) is
// never trusted on first read: it is unverified and set aside to be
// computed again, unless an operator adopts it (`kinflow cache adopt`,
// CheckOptions.AdoptUnrecorded), which checks its shape and values and
// records it. A bad file is moved aside into sequence_info/.quarantine/
// (never deleted), counted as missing and so computed again; a manifest is
// thus only ever rebuilt from files that were computed again or adopted.

// UnrecordedReason is the reason given for a file set aside because it had
// no integrity record.
const UnrecordedReason = "no integrity record (unverified: a damaged manifest or a foreign writer); computed again, or checked and recorded by `kinflow cache adopt`"

// UnsignedReason is the reason given for a file set aside because, with a
// record key, its record carried no authentication code.
const UnsignedReason = "integrity record without its authentication code (written before the record key, by a writer without it, or rewritten); computed again, or checked and recorded by `kinflow cache adopt`"

// QuarantineDir is the folder under sequence_info/ that bad files are moved
// into, by family: `.quarantine/<family>/<file>.<unix nanoseconds>`, each
// with a `.reason` file beside it. Hidden, so no listing counts it.
const QuarantineDir = ".quarantine"

// QuarantineReasonSuffix ends the text file that says why a file was set aside.
const QuarantineReasonSuffix = ".reason"

// BadFile is one cached file that failed its integrity check.
type BadFile struct {
	Family string `json:"family"`
	SeqID  string `json:"seq_id"`
	Reason string `json:"reason"`
	// Quarantined is where the file now is, relative to sequence_info/
	// (empty when it changed again while being set aside and was left).
	Quarantined string `json:"quarantined,omitempty"`
}

// Integrity is what an integrity check found.
type Integrity struct {
	// Checked counts the files compared with their records.
	Checked int `json:"checked"`
	// Hashed counts the files read and hashed (stat differed, no hash
	// recorded, or every file on request).
	Hashed int `json:"hashed"`
	// Recorded counts the records written (a first hash, or a new time for
	// unchanged contents).
	Recorded int `json:"recorded"`
	// Bad lists the files set aside.
	Bad []BadFile `json:"bad,omitempty"`
	// Unrecorded lists the seq ids of files without an integrity record
	// left in place (CheckOptions.KeepUnrecorded): unverified, not used.
	Unrecorded []string `json:"unrecorded,omitempty"`
}

// Add merges o into in.
func (in *Integrity) Add(o Integrity) {
	in.Checked += o.Checked
	in.Hashed += o.Hashed
	in.Recorded += o.Recorded
	in.Bad = append(in.Bad, o.Bad...)
	in.Unrecorded = append(in.Unrecorded, o.Unrecorded...)
}

// Summary is a one-line account of the bad files (at most limit named).
func (in *Integrity) Summary(limit int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d cached file(s) failed the integrity check and were set aside, to be computed again", len(in.Bad))
	for i, bf := range in.Bad {
		if i == limit {
			fmt.Fprintf(&b, "; and %d more", len(in.Bad)-limit)
			break
		}
		sep := ": "
		if i > 0 {
			sep = "; "
		}
		fmt.Fprintf(&b, "%s%s/%s (%s)", sep, bf.Family, bf.SeqID, bf.Reason)
	}
	return b.String()
}

// CheckOptions are CheckFamily's options.
type CheckOptions struct {
	// HashAll reads and hashes every file, whatever its stat (`kinflow
	// cache verify`).
	HashAll bool
	// KeepUnrecorded leaves a file without an integrity record in place
	// (listed in Integrity.Unrecorded, not counted as present) instead of
	// setting it aside: `kinflow cache verify` reports such files and
	// `kinflow cache adopt` may still take them.
	KeepUnrecorded bool
	// AdoptUnrecorded checks a file without an integrity record for shape
	// and finite values and records it (`kinflow cache adopt`, after its
	// sample was recomputed and compared). Never set by a plan.
	AdoptUnrecorded bool
}

// FileStat is what the integrity check's fast path compares of a file.
type FileStat struct {
	Bytes   int64
	MtimeNs int64
	CtimeNs int64
	Ino     uint64
}

func statOf(st *unix.Stat_t) FileStat {
	return FileStat{Bytes: st.Size, MtimeNs: st.Mtim.Nano(), CtimeNs: st.Ctim.Nano(), Ino: st.Ino}
}

// StatFile is path's FileStat (a symlink is not followed).
func StatFile(path string) (FileStat, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return FileStat{}, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return statOf(&st), nil
}

// OldFormat reports whether r is a hashed record of the format written
// before the inode fields were kept (CtimeNs or Ino 0): Matches never holds
// for it, so its file is hashed once at its next check, which records it
// anew with them.
func (r FileRecord) OldFormat() bool { return r.Hashed() && (r.CtimeNs == 0 || r.Ino == 0) }

// Matches reports whether r is a full integrity record (a hash and the
// inode fields) of a file whose stat is s: the fast path's test.
func (r FileRecord) Matches(s FileStat) bool {
	return r.Hashed() && r.CtimeNs != 0 && r.Ino != 0 &&
		r.Bytes == s.Bytes && r.MtimeNs == s.MtimeNs && r.CtimeNs == s.CtimeNs && r.Ino == s.Ino
}

// CheckFamily checks the files of family f for the ids whose present[i] is
// set (sids[i]; seqLen(i) is the sequence's length for the shape check, or
// -1 when unknown) and clears present[i] for every file that is bad (set
// aside) or that vanished meanwhile.
func (l *Layout) CheckFamily(f Family, sids []string, present []bool, seqLen func(i int) int, o CheckOptions) (Integrity, error) {
	return l.checkFamily(f, sids, nil, present, nil, seqLen, o)
}

// slotRecord is a manifest record in the form the check compares.
type slotRecord struct {
	bytes, mtime, ctime int64
	ino                 uint64
	sha                 [sha256.Size]byte
	hashed              bool
	listed              bool
	synthetic           bool
	// mac is the record's authentication code (hex, as recorded; empty:
	// none), checked against the record key by auth.
	mac string
}

// auth is what r's code says of r as the record of sid in folder dir
// (recordkey.go).
func (r *slotRecord) auth(scope, sid string) recordAuth {
	if !r.hashed || r.mac == "" {
		return authNone
	}
	return authOf(scope, sid, r.bytes, r.mtime, r.ctime, r.ino, hex.EncodeToString(r.sha[:]), r.synthetic, []byte(r.mac))
}

// trusted reports whether r may be taken by stat alone: a full record of a
// file whose stat is s and, with a record key, authenticated.
func (r *slotRecord) trusted(scope, sid string, s FileStat) bool {
	if !r.matches(s) {
		return false
	}
	return !HaveRecordKey() || r.auth(scope, sid) == authOK
}

// matches is FileRecord.Matches.
func (r *slotRecord) matches(s FileStat) bool {
	return r.hashed && r.ctime != 0 && r.ino != 0 &&
		r.bytes == s.Bytes && r.mtime == s.MtimeNs && r.ctime == s.CtimeNs && r.ino == s.Ino
}

// rawSlot is a scanned record as a slot.
func rawSlot(r rawRecord) slotRecord {
	s := newSlot(r.Bytes, r.MtimeNs, r.CtimeNs, r.Ino, r.SHA256, true)
	s.synthetic, s.mac = r.Synthetic, string(r.MAC)
	return s
}

func toSlot(r FileRecord, listed bool) slotRecord {
	s := newSlot(r.Bytes, r.MtimeNs, r.CtimeNs, r.Ino, r.SHA256, listed)
	s.synthetic, s.mac = r.Synthetic, r.MAC
	return s
}

// newSlot is a record as a slot, its hex SHA-256 decoded (hashed unless
// it is not 64 hex digits).
func newSlot[H string | []byte](bytes, mtime, ctime int64, ino uint64, sha H, listed bool) slotRecord {
	s := slotRecord{bytes: bytes, mtime: mtime, ctime: ctime, ino: ino, listed: listed}
	if len(sha) == 2*sha256.Size {
		_, err := hex.Decode(s.sha[:], []byte(sha))
		s.hashed = err == nil
	}
	return s
}

// readSlots reads dir's manifest records of the ids in index into a slice
// by index, without an allocation per entry on the common path.
func readSlots(dir string, index map[string]int, n int) []slotRecord {
	return readSlotsOf(dir, index, n, nil, nil)
}

// readSlotsOf is readSlots; from records kept in memory it looks up only
// the ids sids[i] with wanted[i] set when wanted is given (a check's
// present files: the lookups in a family of 300,000 records are most of a
// checked plan's cost beyond its stats, BenchmarkPlanPresence300k).
func readSlotsOf(dir string, index map[string]int, n int, sids []string, wanted []bool) []slotRecord {
	slots := make([]slotRecord, n)
	path := filepath.Join(dir, ManifestName)
	if cachedSlots(path, dir, index, sids, wanted, slots) {
		return slots
	}
	b, key, quiet, err := readManifestForSlots(path)
	if err != nil {
		return slots
	}
	// A quiet manifest's records are all kept for the next reads
	// (slotcache.go), gathered in the same pass unless there are more than
	// the cache holds. The count a manifest opens with says so before the
	// pass: gathering 200,000 records of a family of 300,000 only to drop
	// them took a third of each read (BenchmarkPlanPresence300k).
	var recs map[string]slotRecord
	if count := manifestCount(b); quiet && count <= slotCacheMaxRecords {
		recs = make(map[string]slotRecord, max(count, 0))
	}
	// Only the records asked for are decoded, unless all are gathered.
	want := func(sid []byte) bool {
		_, asked := index[string(sid)]
		return asked || recs != nil
	}
	ok := scanRecordsOf(b, want, func(sid []byte, r rawRecord) {
		s := rawSlot(r)
		if i, asked := index[string(sid)]; asked {
			slots[i] = s
		}
		if recs != nil {
			if len(recs) == slotCacheMaxRecords {
				recs = nil
				return
			}
			recs[string(sid)] = s
		}
	})
	if !ok {
		clear(slots)
		for sid, r := range parseFileRecords(b) {
			if i, ok := index[sid]; ok {
				slots[i] = toSlot(r, true)
			}
		}
		return slots
	}
	if recs != nil {
		slotCache.keep(dir, key, recs)
	}
	return slots
}

// slotsFor reads dir's manifest records of sids, in their order (an id given
// twice gets the same record), with readSlots' scan: the few records a small
// job needs from a family of 100,000 files cost one pass over the manifest,
// not a map of every record.
func slotsFor(dir string, sids []string) []slotRecord {
	index := make(map[string]int, len(sids))
	for _, sid := range sids {
		if _, ok := index[sid]; !ok {
			index[sid] = len(index)
		}
	}
	slots := readSlots(dir, index, len(index))
	out := make([]slotRecord, len(sids))
	for i, sid := range sids {
		out[i] = slots[index[sid]]
	}
	return out
}

// sidsOf are the seq ids of paths, files of family f.
func sidsOf(f Family, paths []string) []string {
	sids := make([]string, len(paths))
	for i, p := range paths {
		sids[i] = strings.TrimSuffix(filepath.Base(p), f.Suffix())
	}
	return sids
}

// checkFamily is CheckFamily; seen, when not nil, holds the stat of each
// present file that the plan's lookup just found (listPresent): a file whose
// record matches it is trusted without a second stat, any other is statted
// again and checked as without it.
func (l *Layout) checkFamily(f Family, sids []string, index map[string]int, present []bool, seen []FileStat, seqLen func(i int) int, o CheckOptions) (Integrity, error) {
	dir := l.FamilyDir(f)
	if !slices.Contains(present, true) {
		return Integrity{}, nil
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return Integrity{}, nil
	}
	if err != nil {
		return Integrity{}, fmt.Errorf("integrity check of %s: %w", f.Name, err)
	}
	defer unix.Close(dfd)
	if index == nil {
		index = make(map[string]int, len(sids))
		for i, sid := range sids {
			index[sid] = i
		}
	}
	c := &familyCheck{l: l, f: f, dir: dir, scope: recordScope(dir), dfd: dfd, sids: sids, present: present, seen: seen, seqLen: seqLen, o: o,
		recs: readSlotsOf(dir, index, len(sids), sids, present), suffix: f.Suffix(), name: make([]byte, 0, 256)}
	for i := range sids {
		if present[i] {
			c.check(i)
		}
	}
	if len(c.bad) == 0 && len(c.updates) == 0 {
		return c.res, nil
	}
	err = c.settle()
	return c.res, err
}

// familyCheck is one integrity check of a family's files: the files found
// bad and the records to write, settled under the manifest lock.
type familyCheck struct {
	l       *Layout
	f       Family
	dir     string
	scope   string
	dfd     int
	sids    []string
	present []bool
	// seen is the stat of each present file from the plan's lookup (nil:
	// the check stats each file itself).
	seen   []FileStat
	seqLen func(i int) int
	o      CheckOptions
	recs   []slotRecord
	suffix string
	name   []byte
	res    Integrity
	bad    []badFile
	// updates are the records to write, of the files updated[k].
	updates []Commit
	updated []int
}

// badFile is a file found bad, with its stat at the time.
type badFile struct {
	i          int
	reason     string
	st         FileStat
	unrecorded bool
	// unsigned: its record, with a record key, had no code.
	unsigned bool
}

// stat is present file i's stat now (an fstatat). ok is false when the
// file is gone (no longer present) or cannot be statted (bad).
func (c *familyCheck) stat(i int) (fs FileStat, ok bool) {
	var st unix.Stat_t
	if err := fstatatName(c.dfd, c.nameOf(i), &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			c.present[i] = false
			return FileStat{}, false
		}
		c.bad = append(c.bad, badFile{i: i, reason: "unreadable: " + errText(err), st: statOf(&st)})
		return FileStat{}, false
	}
	return statOf(&st), true
}

// nameOf is file i's NUL-terminated name (for fstatat).
func (c *familyCheck) nameOf(i int) []byte {
	c.name = append(append(append(c.name[:0], c.sids[i]...), c.suffix...), 0)
	return c.name
}

// check looks at present file i: its stat against its record, else its
// bytes against the recorded SHA-256, or its contents when unrecorded and
// adopted.
func (c *familyCheck) check(i int) {
	sid := c.sids[i]
	c.res.Checked++
	rec := &c.recs[i]
	auth := rec.auth(c.scope, sid)
	authenticated := auth == authOK || !HaveRecordKey()
	if c.seen != nil && !c.o.HashAll && auth != authForged && authenticated && rec.matches(c.seen[i]) {
		// The plan's lookup found the recorded stat: trusted, with no
		// second stat. Anything else is looked at afresh below.
		return
	}
	fs, ok := c.stat(i)
	if !ok {
		return
	}
	if auth == authForged {
		// Rewritten without the record key: neither its stat nor its
		// hash can be believed.
		c.bad = append(c.bad, badFile{i: i, reason: ForgedReason, st: fs})
		return
	}
	if !c.o.HashAll && authenticated && rec.matches(fs) {
		return
	}
	// With a record key, a record without its code is no record at all: a
	// writer of the storage who rewrote a file could have rewritten its
	// record to match and dropped the code. Only `kinflow cache adopt`
	// takes such a file, after its recomputed sample matched.
	believed := rec.hashed && (authenticated || c.o.AdoptUnrecorded)
	if !believed && !c.o.AdoptUnrecorded {
		// Never trusted on first read (see the top of this file).
		if c.o.KeepUnrecorded {
			c.present[i] = false
			c.res.Unrecorded = append(c.res.Unrecorded, sid)
			return
		}
		if rec.hashed {
			c.bad = append(c.bad, badFile{i: i, reason: UnsignedReason, st: fs, unsigned: true})
			return
		}
		c.bad = append(c.bad, badFile{i: i, reason: UnrecordedReason, st: fs, unrecorded: true})
		return
	}
	c.res.Hashed++
	data, err := os.ReadFile(filepath.Join(c.dir, sid+c.suffix))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			c.present[i] = false
			return
		}
		c.bad = append(c.bad, badFile{i: i, reason: "unreadable: " + errText(err), st: fs})
		return
	}
	sum := sha256.Sum256(data)
	record := func() {
		c.updates = append(c.updates, Commit{SeqID: sid, Suffix: c.suffix, Bytes: int64(len(data)), SHA256: hex.EncodeToString(sum[:]),
			MtimeNs: fs.MtimeNs, CtimeNs: fs.CtimeNs, Ino: fs.Ino, RecordOnly: true})
		c.updated = append(c.updated, i)
	}
	var reason string
	switch {
	case believed:
		if sum == rec.sha {
			if !rec.matches(fs) || fs.Bytes != int64(len(data)) || !authenticated {
				record()
			}
			return
		}
		if int64(len(data)) != rec.bytes {
			reason = fmt.Sprintf("%d bytes, recorded %d", len(data), rec.bytes)
		} else {
			reason = "contents differ from the recorded SHA-256"
		}
	default:
		n := -1
		if c.seqLen != nil {
			n = c.seqLen(i)
		}
		if err := CheckContent(c.f, data, n); err != nil {
			reason = err.Error()
			break
		}
		record()
		return
	}
	c.bad = append(c.bad, badFile{i: i, reason: reason, st: fs})
}

// settle sets aside the bad files and writes the new records under the
// manifest lock, against a fresh read: a writer that replaced a file since
// (it records, then renames) is not undone.
func (c *familyCheck) settle() error {
	unlock, err := lockManifest(c.dir)
	if err != nil {
		return err
	}
	defer unlock()
	fresh := ReadFileRecords(c.dir)
	unchanged := func(i int) bool {
		r, ok := fresh[c.sids[i]]
		return toSlot(r, ok) == c.recs[i]
	}
	var keep []Commit
	for k, u := range c.updates {
		if unchanged(c.updated[k]) {
			keep = append(keep, u)
		}
	}
	var remove []string
	for _, b := range c.bad {
		sid := c.sids[b.i]
		if !c.setAside(b, fresh) {
			continue
		}
		q, err := c.l.quarantine(c.f, sid+c.suffix, b.reason)
		if err != nil {
			return err
		}
		c.res.Bad = append(c.res.Bad, BadFile{Family: c.f.Name, SeqID: sid, Reason: b.reason, Quarantined: q})
		if unchanged(b.i) {
			remove = append(remove, sid)
		}
	}
	if len(keep) > 0 || len(remove) > 0 {
		if err := mergeManifestLocked(c.dir, keep, remove); err != nil {
			return err
		}
		c.res.Recorded += len(keep)
	}
	return nil
}

// setAside reports whether bad file b is still the file found bad (so it
// goes to quarantine), and marks it not present unless it was replaced
// while being checked (the next check looks again).
func (c *familyCheck) setAside(b badFile, fresh map[string]FileRecord) bool {
	var now unix.Stat_t
	if err := fstatatName(c.dfd, c.nameOf(b.i), &now); err != nil {
		c.present[b.i] = false
		return false
	}
	if statOf(&now) != b.st {
		// Replaced while being checked: the next check looks again.
		if b.unrecorded {
			c.present[b.i] = false
		}
		return false
	}
	if b.unrecorded {
		if r, ok := fresh[c.sids[b.i]]; ok && r.Hashed() {
			// A writer recorded it meanwhile (it records, then
			// renames): the next check compares it.
			c.present[b.i] = false
			return false
		}
	}
	if b.unsigned {
		if r, ok := fresh[c.sids[b.i]]; ok {
			if authed, _ := RecordAuth(c.dir, c.sids[b.i], r); authed {
				// A writer with the key recorded it meanwhile.
				c.present[b.i] = false
				return false
			}
		}
	}
	c.present[b.i] = false
	return true
}

// quarantine moves name out of f's folder into the quarantine folder with a
// reason file, and returns its new path relative to sequence_info/.
func (l *Layout) quarantine(f Family, name, reason string) (string, error) {
	qdir := l.QuarantineFolder(f)
	if err := mediaroot.MkdirAll(qdir, 0o755); err != nil {
		return "", fmt.Errorf("quarantine folder: %w", err)
	}
	dst := filepath.Join(qdir, name+"."+strconv.FormatInt(time.Now().UnixNano(), 10))
	if err := os.Rename(filepath.Join(l.FamilyDir(f), name), dst); err != nil {
		return "", fmt.Errorf("set aside a bad cached file of %s: %w", f.Name, err)
	}
	_ = os.WriteFile(dst+QuarantineReasonSuffix, []byte(reason+"\n"), 0o644)
	rel, err := filepath.Rel(l.SequenceInfo(), dst)
	if err != nil {
		rel = dst
	}
	return filepath.ToSlash(rel), nil
}

// Quarantined lists the files of family f set aside by integrity checks
// (their names in the quarantine folder, reason files left out).
func (l *Layout) Quarantined(f Family) ([]string, error) {
	ents, err := os.ReadDir(l.QuarantineFolder(f))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && !strings.HasSuffix(e.Name(), QuarantineReasonSuffix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// QuarantinedSeqID is the seq id of a quarantined file's name
// (`<sid><suffix>.<nanoseconds>`), "" when it is not one of f's.
func QuarantinedSeqID(f Family, name string) string {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return ""
	}
	sid, ok := strings.CutSuffix(name[:i], f.Suffix())
	if !ok || !ValidSeqID(sid) {
		return ""
	}
	return sid
}

// CheckContent checks an artefact's contents for family f without a hash
// to compare with: it must decode, have f's width (pooled: Dim values;
// per residue: rows of Dim, as many as f.Rows(seqLen) when seqLen ≥ 0) and
// hold only finite values. A torch file that holds more than one tensor
// (the reference's method E writes a dict) is checked for its structure only.
func CheckContent(f Family, data []byte, seqLen int) error {
	var shape []int
	var finite func() error
	switch f.Format {
	case FormatNPY:
		h, err := readNPYHeader(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("unreadable: %v", err)
		}
		size := h.itemSize()
		n := int64(NumElements(h.shape))
		if size == 0 {
			return fmt.Errorf("npy dtype %q not understood", h.descr)
		}
		if int64(len(data)) < h.size+n*size {
			return fmt.Errorf("truncated: %d bytes, the header promises %d", len(data), h.size+n*size)
		}
		shape = h.shape
		raw := data[h.size : h.size+n*size]
		finite = func() error { return finiteNPY(h.descr, raw) }
	case FormatPT:
		t, err := DecodePT(data)
		if err != nil {
			if cerr := checkTorchBytes(data); cerr != nil {
				return fmt.Errorf("unreadable: %v", cerr)
			}
			return nil
		}
		shape = t.Shape
		finite = func() error { return finiteF32(t.Data) }
	default:
		if len(data) == 0 {
			return errors.New("empty file")
		}
		return nil
	}
	if err := checkShape(f, shape, seqLen); err != nil {
		return err
	}
	return finite()
}

// checkShape checks shape against family f for a sequence of seqLen residues.
func checkShape(f Family, shape []int, seqLen int) error {
	if !f.PerResidue {
		if NumElements(shape) != f.Dim || len(shape) == 0 || shape[len(shape)-1] != f.Dim {
			return fmt.Errorf("shape %v, want [%d]", shape, f.Dim)
		}
		return nil
	}
	if len(shape) != 2 || shape[1] != f.Dim {
		return fmt.Errorf("shape %v, want [L, %d]", shape, f.Dim)
	}
	if seqLen >= 0 && shape[0] != f.Rows(seqLen) {
		return fmt.Errorf("shape %v, want [%d, %d]", shape, f.Rows(seqLen), f.Dim)
	}
	return nil
}

func finiteF32(v []float32) error {
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("non-finite value at %d", i)
		}
	}
	return nil
}

// finiteNPY checks the values of an npy payload of dtype descr (float
// types; other dtypes have no non-finite values).
func finiteNPY(descr string, raw []byte) error {
	var order binary.ByteOrder = binary.LittleEndian
	if strings.HasPrefix(descr, ">") {
		order = binary.BigEndian
	}
	switch strings.TrimLeft(descr, "<>=|") {
	case "f4":
		for i := 0; i+4 <= len(raw); i += 4 {
			x := math.Float32frombits(order.Uint32(raw[i:]))
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("non-finite value at %d", i/4)
			}
		}
	case "f8":
		for i := 0; i+8 <= len(raw); i += 8 {
			x := math.Float64frombits(order.Uint64(raw[i:]))
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return fmt.Errorf("non-finite value at %d", i/8)
			}
		}
	case "f2":
		for i := 0; i+2 <= len(raw); i += 2 {
			// Exponent bits all set: infinity or NaN.
			if order.Uint16(raw[i:])&0x7c00 == 0x7c00 {
				return fmt.Errorf("non-finite value at %d", i/2)
			}
		}
	}
	return nil
}

// checkTorchBytes is checkTorch over bytes in memory.
func checkTorchBytes(data []byte) error {
	if bytes.HasPrefix(data, legacyTorchMagic) {
		return nil
	}
	return checkTorchReader(bytes.NewReader(data), int64(len(data)))
}

// seqLenOf returns the rune length of each id's sequence, -1 when unknown.
func seqLenOf(sids []string, seqs map[string]string) func(i int) int {
	return func(i int) int {
		s, ok := seqs[sids[i]]
		if !ok {
			return -1
		}
		return utf8.RuneCountInString(s)
	}
}

// FamilyOf returns the family named name: a fixed one, or a method E
// checkpoint family (`methode_esm2/<kcat|km>/<model key>`).
func FamilyOf(name string) (Family, bool) {
	if f, ok := FamilyByName(name); ok {
		return f, true
	}
	rest, ok := strings.CutPrefix(name, FamilyMethodEESM2Prefix+"/")
	if !ok {
		return Family{}, false
	}
	param, key, ok := strings.Cut(rest, "/")
	if !ok {
		return Family{}, false
	}
	f, err := MethodEFamily(param, key)
	return f, err == nil
}

// RecordWritten is the GPU host's check of the files a step program just
// wrote: each file whose manifest record matches its stat (kinflow's step
// programs record before the rename) is taken as it is; any other is read,
// checked (CheckContent) and, when good, recorded. It returns the bad files
// with the reason, for the caller to remove and report; a file of no known
// family is left alone.
func (l *Layout) RecordWritten(paths []string) (map[string]string, error) {
	byDir := map[string][]string{}
	for _, p := range paths {
		byDir[filepath.Dir(p)] = append(byDir[filepath.Dir(p)], p)
	}
	bad := map[string]string{}
	for dir, ps := range byDir {
		f, ok := l.FamilyOfDir(dir)
		if !ok {
			continue
		}
		sids := sidsOf(f, ps)
		recs := slotsFor(dir, sids)
		var updates []Commit
		for i, p := range ps {
			sid := sids[i]
			fst, err := StatFile(p)
			if err != nil {
				bad[p] = "unreadable: " + errText(err)
				continue
			}
			if recs[i].trusted(recordScope(dir), sid, fst) {
				continue
			}
			data, err := os.ReadFile(p)
			if err != nil {
				bad[p] = "unreadable: " + errText(err)
				continue
			}
			if err := CheckContent(f, data, -1); err != nil {
				bad[p] = err.Error()
				continue
			}
			sum := sha256.Sum256(data)
			updates = append(updates, Commit{SeqID: sid, Suffix: f.Suffix(), Bytes: int64(len(data)),
				SHA256: hex.EncodeToString(sum[:]), MtimeNs: fst.MtimeNs, CtimeNs: fst.CtimeNs, Ino: fst.Ino, RecordOnly: true})
		}
		if err := MergeManifest(dir, updates, nil); err != nil {
			return bad, err
		}
	}
	return bad, nil
}

// RecordRenamed records the final stat of files a writer has just renamed
// into place (written: the commits it recorded before the renames, with the
// temp file's stat). A rename moves a file's inode change time on most file
// systems, so without this the first check would hash every new file. Only
// a file whose size, modification time and inode are still the recorded
// ones gets its new time; any other (not renamed, or changed since) keeps
// its record and is hashed by its next check.
func RecordRenamed(dir string, written []Commit) error {
	return MergeManifest(dir, renamedRecords(dir, written), nil)
}

// renamedRecords are RecordRenamed's record updates, for a caller that
// merges them with its own commits.
func renamedRecords(dir string, written []Commit) []Commit {
	var updates []Commit
	for _, c := range written {
		if c.SHA256 == "" {
			continue
		}
		st, err := StatFile(filepath.Join(dir, c.SeqID+c.Suffix))
		if err != nil || st.Bytes != c.Bytes || st.MtimeNs != c.MtimeNs || st.Ino != c.Ino || st.CtimeNs == c.CtimeNs {
			continue
		}
		c.CtimeNs, c.RecordOnly = st.CtimeNs, true
		updates = append(updates, c)
	}
	return updates
}

// errText is err's text without the path a *PathError carries (reasons
// reach job events, which never show server paths).
func errText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

// ChangedSinceCheck returns the paths among paths, cached files of
// persistent families, whose stat no longer matches their integrity record
// (rewritten, touched, replaced or gone since the plan's check recorded
// them). It costs one stat per file and one manifest scan per folder: it
// runs after a method has read a stage's files, so that a file changed
// between the check and the read is caught before its numbers are used.
// Files of unknown or ephemeral families (no record is kept) are skipped.
func (l *Layout) ChangedSinceCheck(paths []string) []string {
	dirs, byDir := groupByDir(paths)
	var out []string
	for _, dir := range dirs {
		f, ok := l.FamilyOfDir(dir)
		if !ok || !f.Persistent {
			continue
		}
		ps := byDir[dir]
		sids := sidsOf(f, ps)
		recs := slotsFor(dir, sids)
		for i, p := range ps {
			st, err := StatFile(p)
			if err != nil || !recs[i].trusted(recordScope(dir), sids[i], st) {
				out = append(out, p)
			}
		}
	}
	return out
}

// groupByDir groups paths by their folder, the folders in first-seen order.
func groupByDir(paths []string) (dirs []string, byDir map[string][]string) {
	byDir = map[string][]string{}
	for _, p := range paths {
		d := filepath.Dir(p)
		if _, ok := byDir[d]; !ok {
			dirs = append(dirs, d)
		}
		byDir[d] = append(byDir[d], p)
	}
	return dirs, byDir
}

// RecheckChanged runs the integrity check on files that ChangedSinceCheck
// found (paths of persistent families): a file whose contents are still the
// recorded ones is recorded with its new stat and kept; any other is set
// aside like a plan's bad file. It returns the seq ids whose file is bad
// or gone, and the check's account.
func (l *Layout) RecheckChanged(paths []string) (map[string]bool, Integrity, error) {
	var res Integrity
	lost := map[string]bool{}
	dirs, byDir := groupByDir(paths)
	for _, dir := range dirs {
		f, ok := l.FamilyOfDir(dir)
		if !ok {
			continue
		}
		sids := make([]string, 0, len(byDir[dir]))
		for _, p := range byDir[dir] {
			sids = append(sids, strings.TrimSuffix(filepath.Base(p), f.Suffix()))
		}
		present := make([]bool, len(sids))
		for i := range present {
			present[i] = true
		}
		got, err := l.CheckFamily(f, sids, present, nil, CheckOptions{})
		if err != nil {
			return lost, res, err
		}
		res.Add(got)
		for i, ok := range present {
			if !ok {
				lost[sids[i]] = true
			}
		}
	}
	return lost, res, nil
}
