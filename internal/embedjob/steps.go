package embedjob

import (
	"fmt"
	"strings"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/methods"
)

// ActiveSteps are the step keys a GPU host runs, each the
// type name of one activity.
var ActiveSteps = methods.ActiveSteps()

// deprecatedSteps maps the deprecated step keys to their replacement
// (methoda_bindsites and methoda_prott5_layers both run methoda_t5_full,
// so older callers keep working).
var deprecatedSteps = methods.DeprecatedSteps()

// CanonicalStep returns the active step key for key (a deprecated key maps to
// its replacement) and whether key is known at all.
func CanonicalStep(key string) (string, bool) { return methods.CanonicalStep(key) }

// DefaultMaxResidues is the longest sequence each step's model accepts as it
// is, for the host to cut longer ones with TruncateLong before the step
// program sees them. It is empty: every active step program applies its
// method's own cut (docs/method-cuts.md: method D's first 1,022 residues,
// method F's first 500 + last 500, methods G and H's 1,024-token matrix),
// and a second cut by the host would replace the method's rule with
// another (a 1,030-residue sequence for method D would become 500 + 500).
// The env file sets GPU_EMBED_MAX_RESIDUES_<STEP> for a program that does
// not cut itself.
var DefaultMaxResidues = map[string]int{}

// Layout says which files a step writes for one sequence.
type Layout interface {
	// ExpectedPaths lists the absolute paths step writes for seqID.
	ExpectedPaths(step, seqID string) ([]string, error)
}

// EmbeddingLayout is internal/embedding's artefact layout seen as a Layout:
// the one table of cache families. Method A's binding-site rows (methoda_t5_full) are not files
// and not counted here; the planner checks them.
type EmbeddingLayout struct{ L *embedding.Layout }

// ExpectedPaths implements Layout.
func (e EmbeddingLayout) ExpectedPaths(step, seqID string) ([]string, error) {
	if err := CheckSeqID(seqID); err != nil {
		return nil, err
	}
	spec, err := e.L.Step(step)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(spec.Families))
	for _, f := range spec.Families {
		p, err := e.L.Path(f, seqID)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// CheckSeqID accepts the seq ids a GPU host will turn into file names and
// command arguments: internal/embedding's rule (a safe file name: 1 to 128
// bytes, no separator, no "..", no leading dot, no blank or control
// character; ids imported from a reference seqmap need not follow the
// 12-hex rule),
// and also no leading '-' (it would read as a flag once substituted into
// {seq_ids}) and no ',' ({seq_ids} is comma-joined).
func CheckSeqID(id string) error {
	if !embedding.ValidSeqID(id) || strings.HasPrefix(id, "-") || strings.Contains(id, ",") {
		return fmt.Errorf("invalid seq_id %q: want 1 to 128 characters, no '/', '\\', '..', ',', blank or control character, not starting with '.' or '-'", id)
	}
	return nil
}

// aminoAcids is the allowed alphabet: the 20 amino acids, uppercase only.
const aminoAcids = "ACDEFGHIKLMNPQRSTVWY"

// MaxSequenceLength is the server limit on one sequence, whatever the method.
const MaxSequenceLength = 10000

// CheckSequence accepts 1 to MaxSequenceLength residues from the 20 standard
// amino acids, upper-case, nothing else.
func CheckSequence(seq string) error {
	if seq == "" {
		return fmt.Errorf("empty sequence")
	}
	if len(seq) > MaxSequenceLength {
		return fmt.Errorf("sequence of %d residues is longer than %d", len(seq), MaxSequenceLength)
	}
	for i := 0; i < len(seq); i++ {
		if strings.IndexByte(aminoAcids, seq[i]) < 0 {
			return fmt.Errorf("character %q at position %d is not one of %s", seq[i], i+1, aminoAcids)
		}
	}
	return nil
}

// TruncateLong is the one rule for a sequence longer than a model accepts:
// the first 500 and the last 500 residues, joined (what the reference's
// method F ESM-1v worker does). It is deterministic, keeps both termini and
// always fits max >= 1000. For a max below 1000 it keeps the first ⌊max/2⌋
// and the last ⌊max/2⌋ residues (the job's long-sequence rule). A sequence
// within max is returned as it is.
func TruncateLong(seq string, max int) string {
	if max <= 0 || len(seq) <= max {
		return seq
	}
	half := 500
	if max < 1000 {
		half = max / 2
	}
	return seq[:half] + seq[len(seq)-half:]
}
