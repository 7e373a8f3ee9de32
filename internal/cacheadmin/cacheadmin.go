// Package cacheadmin is the operator's view of the embedding cache (`kinflow
// cache status|verify|adopt|purge`): what each artefact
// family holds and which model made it, recomputing a sample with the
// configured step program to check it, taking files of unknown origin under
// the configured fingerprint once they pass, and removing files.
package cacheadmin

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/embedjob"
	"github.com/kinflow/kinflow/internal/provenance"
)

// Families lists the layout's families: the fixed ones and every method E
// checkpoint family found on disk or in the checkpoint root, sorted by name.
func Families(l *embedding.Layout) []embedding.Family {
	out := embedding.Families()
	seen := map[string]bool{}
	for _, f := range out {
		seen[f.Name] = true
	}
	add := func(f embedding.Family) {
		if !seen[f.Name] {
			seen[f.Name] = true
			out = append(out, f)
		}
	}
	for _, param := range []string{"kcat", "km"} {
		keys, _ := l.MethodEModelKeys(param)
		ents, _ := os.ReadDir(l.MethodEParameterDir(param))
		for _, e := range ents {
			if e.IsDir() {
				keys = append(keys, e.Name())
			}
		}
		for _, k := range keys {
			if f, err := embedding.MethodEFamily(param, k); err == nil {
				add(f)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// FamilyByName finds a family of the layout by name, or by its folder
// under the layout's naming (`esm1b_turnup` with KINFLOW_CACHE_FOLDERS=reference).
func FamilyByName(l *embedding.Layout, name string) (embedding.Family, error) {
	fams := Families(l)
	for _, f := range fams {
		if f.Name == name {
			return f, nil
		}
	}
	for _, f := range fams {
		if l.Folder(f) == strings.Trim(name, "/") {
			return f, nil
		}
	}
	return embedding.Family{}, fmt.Errorf("unknown family %q (see `kinflow cache status`)", name)
}

// StepsOf lists the step keys that write family name, in ActiveSteps
// order (prot_t5_last/mean_vecs has two: methoda_t5_full and prot_t5_mean).
func StepsOf(l *embedding.Layout, name string) ([]string, error) {
	var out []string
	for _, k := range embedjob.ActiveSteps {
		spec, err := l.Step(k)
		if err != nil {
			continue
		}
		for _, f := range spec.Families {
			if f.Name == name {
				out = append(out, k)
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no step writes family %q", name)
	}
	return out, nil
}

// StepOf is the first step key that writes family name.
func StepOf(l *embedding.Layout, name string) (string, error) {
	steps, err := StepsOf(l, name)
	if err != nil {
		return "", err
	}
	return steps[0], nil
}

// FamilyStatus is one family's line of `kinflow cache status`.
type FamilyStatus struct {
	Family string `json:"family"`
	Files  int    `json:"files"`
	Bytes  int64  `json:"bytes"`
	// Fingerprint is the recorded fingerprint id ("" when none).
	Fingerprint string `json:"fingerprint"`
	// Model is the recorded fingerprint's model.
	Model string `json:"model,omitempty"`
	// Synthetic counts the synthetic files; Unverified the files of unknown
	// origin (no record, or a record made over them and not adopted).
	Synthetic  int `json:"synthetic"`
	Unverified int `json:"unverified"`
	// Unhashed counts the files without an integrity record (a damaged
	// manifest, a foreign writer, the reference's cache): never trusted,
	// set aside at their next use unless `kinflow cache adopt` takes them.
	Unhashed int `json:"unhashed"`
	// Mismatched counts the files whose stat (size, times, inode) differs
	// from their record: hashed before their next use, and set aside if
	// the contents differ.
	Mismatched int `json:"mismatched"`
	// OldFormat counts the files whose record an older kinflow wrote,
	// without the inode fields (ctime, inode) the quick check compares, and
	// whose size and modification time match it: not damage, but hashed
	// once at their next use (or by `kinflow cache verify`) and recorded
	// anew. Not counted in Mismatched.
	OldFormat int `json:"old_format"`
	// Forged counts the files whose record's authentication code fails
	// (with a record key set, KINFLOW_CACHE_RECORD_KEY_FILE): a manifest
	// rewritten by someone without the key. Never trusted: set aside at
	// their next use or by `kinflow cache verify`. Not counted in
	// Mismatched.
	Forged int `json:"forged"`
	// Unauthenticated counts the files whose record has no authentication
	// code though a record key is set (written before the key, or by a
	// writer without it): hashed at their next use and recorded anew with
	// a code.
	Unauthenticated int `json:"unauthenticated"`
	// Quarantined counts the files integrity checks set aside
	// (sequence_info/.quarantine/<family>/).
	Quarantined int `json:"quarantined"`
}

// Origin is one word: empty, synthetic, real, mixed or unverified.
func (s FamilyStatus) Origin() string {
	switch {
	case s.Files == 0:
		return "empty"
	case s.Unverified > 0 && s.Unverified == s.Files:
		return "unverified"
	case s.Synthetic == s.Files:
		return "synthetic"
	case s.Synthetic > 0 || s.Unverified > 0:
		return "mixed"
	}
	return "real"
}

// lockedFamily takes dir's record lock (provenance.LockFamily) and reads,
// under it, the family's artefacts (seq id → bytes) and its record; the
// caller lets go with unlock once it has changed the family.
func lockedFamily(dir, suffix string) (unlock func(), have map[string]int64, rec *provenance.Recorded, err error) {
	unlock, err = provenance.LockFamily(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	if have, err = artefacts(dir, suffix); err == nil {
		rec, err = provenance.ReadRecorded(dir)
	}
	if err != nil {
		unlock()
		return nil, nil, nil, err
	}
	return unlock, have, rec, nil
}

// artefacts lists dir's artefact files with their sizes, by seq id.
func artefacts(dir, suffix string) (map[string]int64, error) {
	out := map[string]int64{}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, suffix) || len(name) == len(suffix) || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		out[strings.TrimSuffix(name, suffix)] = info.Size()
	}
	return out, nil
}

// syntheticIDs returns the ids of dir's synthetic files among have.
func syntheticIDs(dir string, rec *provenance.Recorded, have map[string]int64) map[string]bool {
	out := map[string]bool{}
	if rec.AllSynthetic() && !rec.Unverified {
		for sid := range have {
			out[sid] = true
		}
		return out
	}
	if rec != nil && !rec.SyntheticFiles && !rec.AllSynthetic() {
		return out
	}
	for sid, e := range embedding.ReadManifest(dir) {
		if _, ok := have[sid]; ok && e.Synthetic {
			out[sid] = true
		}
	}
	return out
}

// Status describes every family that holds files (or a record).
func Status(l *embedding.Layout) ([]FamilyStatus, error) {
	var out []FamilyStatus
	for _, f := range Families(l) {
		dir := l.FamilyDir(f)
		have, err := artefacts(dir, f.Suffix())
		if err != nil {
			return nil, err
		}
		rec, err := provenance.ReadRecorded(dir)
		if err != nil {
			return nil, err
		}
		quarantined, err := l.Quarantined(f)
		if err != nil {
			return nil, err
		}
		if len(have) == 0 && rec == nil && len(quarantined) == 0 {
			continue
		}
		s := FamilyStatus{Family: f.Name, Files: len(have), Quarantined: len(quarantined)}
		if err = integrityCounts(dir, f.Suffix(), have, &s); err != nil {
			return nil, err
		}
		for _, n := range have {
			s.Bytes += n
		}
		if rec != nil {
			s.Fingerprint, s.Model = rec.ID, rec.Fingerprint.Model
		}
		synth := syntheticIDs(dir, rec, have)
		s.Synthetic = len(synth)
		if rec == nil || (rec.Unverified && rec.Adopted == nil) {
			s.Unverified = len(have) - len(synth)
		}
		out = append(out, s)
	}
	return out, nil
}

// integrityCounts stats have's files against dir's manifest records into
// s: the files without a hash recorded, those whose record's
// authentication code fails (forged) or, with a record key, is missing,
// those whose record is of the old format (no inode fields) and otherwise
// agrees with their stat, and those whose stat differs from their record.
func integrityCounts(dir, suffix string, have map[string]int64, s *FamilyStatus) error {
	recs := embedding.ReadFileRecords(dir)
	keyed := embedding.HaveRecordKey()
	for sid := range have {
		r, ok := recs[sid]
		if !ok || !r.Hashed() {
			s.Unhashed++
			continue
		}
		authenticated, forged := embedding.RecordAuth(dir, sid, r)
		if forged {
			s.Forged++
			continue
		}
		if keyed && !authenticated {
			s.Unauthenticated++
		}
		st, err := embedding.StatFile(filepath.Join(dir, sid+suffix))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		switch {
		case r.Matches(st):
		case r.OldFormat() && r.Bytes == st.Bytes && r.MtimeNs == st.MtimeNs:
			s.OldFormat++
		default:
			s.Mismatched++
		}
	}
	return nil
}

// PurgeResult says what Purge removed.
type PurgeResult struct {
	Removed int
	Bytes   int64
	// RecordRemoved: the family's fingerprint record went too.
	RecordRemoved bool
}

// Purge removes family's files: all of them (with the manifest and the
// record), or with syntheticOnly only the synthetic ones (and their manifest
// entries; a synthetic record of a family left empty goes too).
func Purge(l *embedding.Layout, family string, syntheticOnly bool) (PurgeResult, error) {
	var res PurgeResult
	f, err := FamilyByName(l, family)
	if err != nil {
		return res, err
	}
	dir := l.FamilyDir(f)
	unlock, have, rec, err := lockedFamily(dir, f.Suffix())
	if err != nil {
		return res, err
	}
	defer unlock()
	victims := map[string]bool{}
	if syntheticOnly {
		victims = syntheticIDs(dir, rec, have)
	} else {
		for sid := range have {
			victims[sid] = true
		}
	}
	ids := slices.Sorted(maps.Keys(victims))
	for _, sid := range ids {
		if err := os.Remove(filepath.Join(dir, sid+f.Suffix())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return res, err
		}
		res.Removed++
		res.Bytes += have[sid]
	}
	if err := embedding.MergeManifest(dir, nil, ids); err != nil && len(ids) > 0 {
		return res, err
	}
	left := len(have) - res.Removed
	switch {
	case !syntheticOnly || (left == 0 && rec.AllSynthetic()):
		if rec != nil {
			if err := os.Remove(filepath.Join(dir, provenance.RecordName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return res, err
			}
			res.RecordRemoved = true
		}
		if !syntheticOnly {
			_ = os.Remove(filepath.Join(dir, embedding.ManifestName))
		}
	}
	// A record's SyntheticFiles stays set after --synthetic: a synthetic
	// writer admitted before the purge (provenance.Admit's fast path reads
	// the flag, takes no lock) may still be adding files, flagged only in
	// the manifest; clearing the flag would make readers skip the manifest
	// and take those files for the real model's.
	return res, nil
}
