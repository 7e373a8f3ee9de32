package embedding

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"unicode/utf8"

	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/provenance"
)

// The synthetic embedder stands in for the real models (the `synthetic`
// step executor): every artefact it writes has the real model's shape
// ([Dim] pooled, [L, Dim] per residue) and values that depend only on the
// family and the sequence, so reruns and other hosts write identical files.
// Its outputs are flagged: each manifest entry it writes carries
// `"synthetic": true` (see MergeManifest and ReadManifest).

// seededRand is a ChaCha8 stream keyed by SHA-256(label NUL sequence).
func seededRand(label, seq string) *rand.Rand {
	h := sha256.New()
	h.Write([]byte(label))
	h.Write([]byte{0})
	h.Write([]byte(seq))
	var seed [32]byte
	copy(seed[:], h.Sum(nil))
	return rand.New(rand.NewChaCha8(seed))
}

// SyntheticArtefact is the synthetic tensor of family f for seq: uniform
// values in [-1, 1) with f's shape for the sequence's length.
func SyntheticArtefact(f Family, seq string) Tensor {
	shape := f.Shape(utf8.RuneCountInString(seq))
	r := seededRand("artefact:"+f.Name, seq)
	data := make([]float32, NumElements(shape))
	for i := range data {
		data[i] = r.Float32()*2 - 1
	}
	return Tensor{Shape: shape, Data: data}
}

// SyntheticBindingSites is the synthetic per-residue binding-site
// probabilities of seq, in [0, 1], one per residue.
func SyntheticBindingSites(seq string) []float32 {
	r := seededRand("binding_sites", seq)
	out := make([]float32, utf8.RuneCountInString(seq))
	for i := range out {
		out[i] = r.Float32()
	}
	return out
}

// EncodeArtefact encodes t in format f.
func EncodeArtefact(format Format, t Tensor) ([]byte, error) {
	switch format {
	case FormatNPY:
		return EncodeNPY(t)
	case FormatPT:
		return EncodePT(t)
	}
	return nil, fmt.Errorf("unknown artefact format %q", format)
}

// ComputeStep runs one step with the synthetic embedder: for every id it
// writes each of the step's artefacts that does not exist yet (one lookup
// per file decides, listPresent), through the cache write protocol, calling
// onFile (may be nil) with each path written; methoda_t5_full also appends the
// missing binding-site rows. It is idempotent and resumable: a rerun after a
// crash or cancellation writes only what is still missing. It stops at ctx's
// cancellation and returns the files written so far.
func ComputeStep(ctx context.Context, l *Layout, stepKey string, seqIDs []string, seqIDToSeq map[string]string, onFile func(path string)) (written int, err error) {
	spec, err := l.Step(stepKey)
	if err != nil {
		return 0, err
	}
	ids, index, err := distinctSeqIDs(spec, seqIDs, seqIDToSeq)
	if err != nil {
		return 0, err
	}
	if spec.BindingSites {
		if err := appendSyntheticBindingSites(l, spec, ids, index, seqIDToSeq); err != nil {
			return 0, err
		}
	}
	dirs, present, err := admitSynthetic(l, spec, ids, index)
	if err != nil {
		return 0, err
	}
	w := &syntheticWriter{ctx: ctx, spec: spec, dirs: dirs, onFile: onFile, renamed: make([][]Commit, len(spec.Families))}
	defer w.recordRenamed()
	defer w.discard()
	for i, sid := range ids {
		for fi, f := range spec.Families {
			if present[fi][i] {
				continue
			}
			if err := ctx.Err(); err != nil {
				return w.written, err
			}
			if err := w.stage(fi, f, sid, seqIDToSeq[sid]); err != nil {
				return w.written, err
			}
		}
		if len(w.chunk) >= syncChunkFiles*len(spec.Families) {
			if err := w.commit(); err != nil {
				return w.written, err
			}
		}
	}
	err = w.commit()
	return w.written, err
}

// distinctSeqIDs checks seqIDs and returns them without repeats, in first
// occurrence order, with each one's index.
func distinctSeqIDs(spec StepSpec, seqIDs []string, seqIDToSeq map[string]string) ([]string, map[string]int, error) {
	index := make(map[string]int, len(seqIDs))
	ids := make([]string, 0, len(seqIDs))
	for _, sid := range seqIDs {
		if !ValidSeqID(sid) {
			return nil, nil, fmt.Errorf("step %s: invalid seq id %q", spec.Key, sid)
		}
		if _, ok := seqIDToSeq[sid]; !ok {
			return nil, nil, fmt.Errorf("step %s: no sequence for seq id %q", spec.Key, sid)
		}
		if _, dup := index[sid]; !dup {
			index[sid] = len(ids)
			ids = append(ids, sid)
		}
	}
	return ids, index, nil
}

// appendSyntheticBindingSites appends the binding-site rows of ids that the
// table does not hold yet.
func appendSyntheticBindingSites(l *Layout, spec StepSpec, ids []string, index map[string]int, seqIDToSeq map[string]string) error {
	have := make([]bool, len(ids))
	if err := scanTable(l.BindingSiteTable(), func(id, _ []byte) {
		if i, ok := index[string(id)]; ok {
			have[i] = true
		}
	}); err != nil {
		return err
	}
	var rows []BindingSiteRow
	for i, sid := range ids {
		if !have[i] {
			rows = append(rows, BindingSiteRow{SeqID: sid, Scores: SyntheticBindingSites(seqIDToSeq[sid])})
		}
	}
	if _, err := AppendBindingSites(l.BindingSiteTable(), rows); err != nil {
		return fmt.Errorf("step %s: %w", spec.Key, err)
	}
	return nil
}

// admitSynthetic lists which of ids' files each family of spec holds
// (present[family][index]) and admits the synthetic writer to every family
// it will write.
func admitSynthetic(l *Layout, spec StepSpec, ids []string, index map[string]int) (dirs []string, present [][]bool, err error) {
	dirs = make([]string, len(spec.Families))
	present = make([][]bool, len(spec.Families))
	for fi, f := range spec.Families {
		dirs[fi] = l.FamilyDir(f)
		present[fi] = make([]bool, len(ids))
		if err := listPresent(dirs[fi], f.Suffix(), index, present[fi], nil); err != nil {
			return nil, nil, err
		}
		// The check before the write (internal/provenance): a synthetic
		// writer is never refused, but the family's record says that
		// synthetic files are in it, so no real engine consumes them.
		if slices.Contains(present[fi], false) {
			if _, err := provenance.Admit(dirs[fi], f.Name, provenance.Synthetic(spec.Key)); err != nil {
				return nil, nil, fmt.Errorf("step %s: %w", spec.Key, err)
			}
			protocolPoint("admitted")
		}
	}
	return dirs, present, nil
}

// syntheticWriter writes a step's synthetic files in chunks: every temp
// file of a chunk, one sync of the file system, then the chunk's manifest
// entries (flagged synthetic, with each file's size, time and hash), and
// only then the renames. A file is thus listed as synthetic before it
// becomes visible: a writer killed at any point leaves no unlisted
// synthetic file that a reader could take for a real model's (the entries
// of files never renamed are harmless: presence is decided by the files
// themselves). Each file still appears complete or not at all, at a fraction
// of the cost of an fsync per file.
type syntheticWriter struct {
	ctx     context.Context
	spec    StepSpec
	dirs    []string
	onFile  func(path string)
	chunk   []stagedFile
	written int
	// renamed holds, per family, the commits of the files the last chunk
	// renamed into place; the next merge, or recordRenamed at the end,
	// records their final inode change times (a rename moves them).
	renamed [][]Commit
}

// stagedFile is one temp file of a chunk, not yet renamed.
type stagedFile struct {
	fi   int
	sid  string
	tmp  fsutil.Temp
	size int
	sum  string
}

// stage writes sid's artefact of family f (index fi) as a temp file.
func (w *syntheticWriter) stage(fi int, f Family, sid, seq string) error {
	data, err := EncodeArtefact(f.Format, SyntheticArtefact(f, seq))
	if err != nil {
		return fmt.Errorf("step %s: %w", w.spec.Key, err)
	}
	t, err := writeArtefactTemp(w.dirs[fi], sid, f.Suffix(), data, false)
	if err != nil {
		return fmt.Errorf("step %s: %w", w.spec.Key, err)
	}
	sum := sha256.Sum256(data)
	w.chunk = append(w.chunk, stagedFile{fi: fi, sid: sid, tmp: t, size: len(data), sum: hex.EncodeToString(sum[:])})
	protocolPoint("temp written")
	return nil
}

// commit syncs, lists and renames the chunk's files; at ctx's cancellation
// it stops after the file being renamed.
func (w *syntheticWriter) commit() error {
	if len(w.chunk) == 0 {
		return nil
	}
	temps := make([]fsutil.Temp, len(w.chunk))
	for i, c := range w.chunk {
		temps[i] = c.tmp
	}
	if err := fsutil.SyncTemps(temps); err != nil {
		return err
	}
	protocolPoint("synced")
	if err := w.list(); err != nil {
		return err
	}
	for i, c := range w.chunk {
		if err := c.tmp.Commit(); err != nil {
			for _, rest := range w.chunk[i+1:] {
				rest.tmp.Discard()
			}
			w.chunk = nil
			return fmt.Errorf("step %s: %w", w.spec.Key, err)
		}
		w.written++
		protocolPoint("renamed")
		if w.onFile != nil {
			w.onFile(c.tmp.Final)
		}
		if err := w.ctx.Err(); err != nil {
			// Stop at the cancellation: the rest of the chunk is dropped
			// (discard removes its temp files).
			w.chunk = w.chunk[i+1:]
			return err
		}
	}
	w.chunk = w.chunk[:0]
	return nil
}

// list merges the chunk's manifest entries, family by family.
func (w *syntheticWriter) list() error {
	pending := make([][]Commit, len(w.spec.Families))
	for _, c := range w.chunk {
		st, err := StatFile(c.tmp.Path)
		if err != nil {
			return fmt.Errorf("step %s: %w", w.spec.Key, err)
		}
		pending[c.fi] = append(pending[c.fi], Commit{SeqID: c.sid, Suffix: w.spec.Families[c.fi].Suffix(), Bytes: int64(c.size),
			Synthetic: true, SHA256: c.sum, MtimeNs: st.MtimeNs, CtimeNs: st.CtimeNs, Ino: st.Ino})
	}
	for fi := range pending {
		// The last chunk's renames moved its files' inode change times:
		// their final ones ride along in this merge, so that the next check
		// is a stat, not a hash, at no extra merge.
		merge := append(renamedRecords(w.dirs[fi], w.renamed[fi]), pending[fi]...)
		if err := MergeManifest(w.dirs[fi], merge, nil); err != nil {
			return fmt.Errorf("step %s: %w", w.spec.Key, err)
		}
		w.renamed[fi] = nil
		protocolPoint("listed")
	}
	copy(w.renamed, pending)
	return nil
}

// recordRenamed records the final inode change times of the last chunk's
// renamed files (best effort: a file without them is hashed once at its
// next check).
func (w *syntheticWriter) recordRenamed() {
	for fi := range w.renamed {
		_ = RecordRenamed(w.dirs[fi], w.renamed[fi])
	}
}

// discard removes the temp files of a chunk never committed.
func (w *syntheticWriter) discard() {
	for _, c := range w.chunk {
		c.tmp.Discard()
	}
}

// protocolPoint is called at each point of the synthetic writer's write
// protocol (temp file written, folder synced, manifest merged, file
// renamed). It does nothing in production; a test kills the process at
// each point in turn (TestKilledSyntheticWriterNeverPassesAsReal).
var protocolPoint = func(string) {}

// syncChunkFiles is how many files per family share one file-system sync
// and one manifest merge (a merge rewrites the whole manifest, so fewer and
// larger chunks keep a 10,000-sequence step near linear: 40 merges per
// family, as many as before the manifest was written ahead of the renames).
const syncChunkFiles = 256
