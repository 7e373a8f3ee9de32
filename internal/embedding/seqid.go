// Package embedding is the shared protein-embedding cache
// (docs/embedding.md): sequence ids, artefact families and their paths, the embedding
// planner, the artefact file formats (.npy, .pt, the binding-site table), the
// cache write protocol shared with the reference's GPU workers and
// the synthetic embedder.
//
// It is pure Go and knows nothing of Temporal or the database: sequence ids
// are assigned by internal/store with the algorithm of internal/seqid.
package embedding

import (
	"strings"

	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/seqid"
)

// The sequence-id algorithm lives in internal/seqid; these names keep it
// reachable beside the cache layout it names files for.

// SeqIDBaseLen is seqid.BaseLen.
const SeqIDBaseLen = seqid.BaseLen

// MaxSeqIDLen is seqid.MaxLen.
const MaxSeqIDLen = seqid.MaxLen

// SHA256Hex is seqid.SHA256Hex.
func SHA256Hex(seq string) string { return seqid.SHA256Hex(seq) }

// BaseSeqID is seqid.Base.
func BaseSeqID(seq string) string { return seqid.Base(seq) }

// CandidateSeqID is seqid.Candidate.
func CandidateSeqID(base string, n int) string { return seqid.Candidate(base, n) }

// ValidSeqID is seqid.Valid: id is safe as a file name in a cache folder.
func ValidSeqID(id string) bool { return seqid.Valid(id) }

// MethodDMaxLen is the length method D's sequences are cut to before mapping
// (ESM-1b's 1022-residue window).
const MethodDMaxLen = 1022

// NormaliseSequences applies the planner's normalisation (docs/embedding.md,
// "Normalisation") for a method with the given planner profile: trim surrounding
// whitespace, drop empty sequences, for method D (profile methodd_esm1b)
// upper-case and cut to the first 1022 characters, then de-duplicate,
// keeping the first occurrence's order. Nothing else changes: inner
// characters and case are hashed as given.
func NormaliseSequences(profile string, seqs []string) []string {
	out := make([]string, 0, len(seqs))
	seen := make(map[string]struct{}, len(seqs))
	for _, s := range seqs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if profile == methods.ProfileMethodDESM1b {
			s = strings.ToUpper(s)
			s = cutRunes(s, MethodDMaxLen)
		}
		if _, dup := seen[s]; dup {
			continue
		}
		seen[s] = struct{}{}
		out = append(out, s)
	}
	return out
}

// cutRunes keeps the first n characters (code points, as the reference's
// Python slicing does) of s.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	return s
}
