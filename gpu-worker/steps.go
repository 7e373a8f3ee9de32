// Package gpuworker is kinflow's GPU host: the Temporal worker on the GPU task
// queue (one activity per step key, SEED-SPEC §5.3), the GPU service HTTP API
// (§4.2, WIRE-CONTRACT §10) and the step executors (command and synthetic).
//
// Both ways a GPU job starts — the backend's PredictionWorkflow starting the
// EmbedJob child workflow, and POST /embed/jobs on this host — run the same
// EmbedJob workflow, whose steps are the activities registered here.
package gpuworker

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/methods"
)

// ActiveSteps are the step keys a GPU host runs (SEED-SPEC §5.3), each the
// type name of one activity.
var ActiveSteps = methods.ActiveSteps()

// deprecatedSteps maps the deprecated step keys to their replacement
// (SEED-SPEC §5.3, WIRE-CONTRACT difference 11).
var deprecatedSteps = methods.DeprecatedSteps()

// CanonicalStep returns the active step key for key (a deprecated key maps to
// its replacement) and whether key is known at all.
func CanonicalStep(key string) (string, bool) { return methods.CanonicalStep(key) }

// DefaultMaxResidues is the longest sequence each step's model accepts as it
// is. ESM-1b and ESM-1v were trained on 1,024 tokens including BOS and EOS, so
// 1,022 residues; longer sequences follow TruncateLong. Steps not listed take
// any length (their programs handle it). The env file overrides these with
// GPU_EMBED_MAX_RESIDUES_<STEP>.
var DefaultMaxResidues = map[string]int{
	"methodd_esm1b": 1022,
	"methodf_esm1v": 1022,
}

// Layout says which files a step writes for one sequence.
type Layout interface {
	// ExpectedPaths lists the absolute paths step writes for seqID.
	ExpectedPaths(step, seqID string) ([]string, error)
}

// EmbeddingLayout is internal/embedding's artefact layout seen as a Layout
// (the default). Method A's binding-site rows (methoda_t5_full) are not files
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

// TableLayout is the artefact table of SEED-SPEC §2.5 / WIRE-CONTRACT §9.2,
// keyed by step: the GPU host's own copy, kept as a cross-check of
// EmbeddingLayout (layout_test.go).
type TableLayout struct {
	// MediaRoot holds sequence_info/.
	MediaRoot string
	// MethodECheckpointRoot is METHODE_CHECKPOINT_ROOT: method E writes one
	// file per model.pt found under <root>/<kcat|km>/.
	MethodECheckpointRoot string
}

var methodaRoots = map[string][]string{
	"methoda_t5_full":     {"prot_t5_layer_19", "prot_t5_last"},
	"methoda_esm2_layers": {"esm2_layer_26", "esm2_layer_29"},
	"methoda_esmc_layers": {"esmc_layer_24", "esmc_layer_32"},
}

var singleFile = map[string]string{
	"prot_t5_mean":             "prot_t5_last/mean_vecs/%s.npy",
	"methodd_esm1b":            "esm1b_methodd/%s.npy",
	"methodf_esm1v":            "esm1v/%s.npy",
	"methodg_esm2":             "methodg_esm2/%s.pt",
	"methodh_esm2_last_mean":   "esm2_layer_last_mean/%s.npy",
	"methodi_prot_t5_residues": "methodi_prot_t5_residues/%s.npy",
}

// ExpectedPaths implements Layout.
func (l TableLayout) ExpectedPaths(step, seqID string) ([]string, error) {
	if err := CheckSeqID(seqID); err != nil {
		return nil, err
	}
	base := filepath.Join(l.MediaRoot, "sequence_info")
	if roots, ok := methodaRoots[step]; ok {
		var out []string
		for _, r := range roots {
			for _, kind := range []string{"mean_vecs", "weighted_vecs"} {
				out = append(out, filepath.Join(base, r, kind, seqID+".npy"))
			}
		}
		return out, nil
	}
	if f, ok := singleFile[step]; ok {
		return []string{filepath.Join(base, fmt.Sprintf(f, seqID))}, nil
	}
	if param, ok := strings.CutPrefix(step, "methode_embed_"); ok && (param == "kcat" || param == "km") {
		keys, err := MethodEModelKeys(l.MethodECheckpointRoot, param)
		if err != nil {
			return nil, err
		}
		out := make([]string, 0, len(keys))
		for _, k := range keys {
			out = append(out, filepath.Join(base, "methode_esm2", param, k, seqID+".pt"))
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown step key %q", step)
}

// MethodEModelKeys lists method E's model keys for param (kcat or km):
// <grandparent dir>__<parent dir> of each model.pt under <root>/<param>/,
// sorted (WIRE-CONTRACT §9.2). No checkpoint is an error: the step would have
// nothing to write.
func MethodEModelKeys(root, param string) ([]string, error) {
	if root == "" {
		return nil, fmt.Errorf("method E step needs METHODE_CHECKPOINT_ROOT in the GPU host's env file")
	}
	dir := filepath.Join(root, param)
	var keys []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || d.Name() != "model.pt" {
			return nil
		}
		parent := filepath.Dir(p)
		keys = append(keys, filepath.Base(filepath.Dir(parent))+"__"+filepath.Base(parent))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list method E checkpoints under %s: %w", dir, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no method E checkpoints (model.pt) under %s", dir)
	}
	sort.Strings(keys)
	return keys, nil
}

// CheckSeqID accepts the seq ids a GPU host will turn into file names and
// command arguments: internal/embedding's rule (a safe file name: 1 to 128
// bytes, no separator, no "..", no leading dot, no blank or control
// character; legacy ids need not follow the 12-hex rule, WIRE-CONTRACT §8),
// and also no leading '-' (it would read as a flag once substituted into
// {seq_ids}) and no ',' ({seq_ids} is comma-joined).
func CheckSeqID(id string) error {
	if !embedding.ValidSeqID(id) || strings.HasPrefix(id, "-") || strings.Contains(id, ",") {
		return fmt.Errorf("invalid seq_id %q: want 1 to 128 characters, no '/', '\\', '..', ',', blank or control character, not starting with '.' or '-'", id)
	}
	return nil
}

// aminoAcids is the allowed alphabet (WIRE-CONTRACT §4.2).
const aminoAcids = "ACDEFGHIKLMNPQRSTVWY"

// MaxSequenceLength is the server limit on one sequence (WIRE-CONTRACT §4.3).
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
// the first 500 and the last 500 residues, joined (WIRE-CONTRACT §10.4,
// method F's ESM-1v worker). It is deterministic, keeps both termini and
// always fits max >= 1000. For a max below 1000 it keeps the first ⌊max/2⌋
// and the last ⌊max/2⌋ residues (WIRE-CONTRACT §4.3's rule). A sequence
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
