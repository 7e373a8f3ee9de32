// Package embedding is the shared protein-embedding cache (SEED-SPEC
// §2.3–2.5): sequence ids, artefact families and their paths, the embedding
// planner, the artefact file formats (.npy, .pt, the binding-site table), the
// cache write protocol shared with the reference's GPU workers (WIRE §9.7) and
// the synthetic embedder.
//
// It is pure Go and knows nothing of Temporal or the database: sequence ids
// are assigned by internal/store with the algorithm defined here.
package embedding

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/kinflow/kinflow/internal/methods"
)

// SeqIDBaseLen is the number of hex characters of a sequence's SHA-256 that
// form its base seq id (WIRE §8).
const SeqIDBaseLen = 12

// MaxSeqIDLen bounds a seq id. Ids become file names; 128 leaves room for
// suffixes and temp names under every file system's 255-byte name limit.
const MaxSeqIDLen = 128

// SHA256Hex is the lowercase hex SHA-256 of the sequence's bytes, hashed
// exactly as given (WIRE §8: case-sensitive, no trimming).
func SHA256Hex(seq string) string {
	sum := sha256.Sum256([]byte(seq))
	return hex.EncodeToString(sum[:])
}

// BaseSeqID is the first SeqIDBaseLen hex characters of the sequence's SHA-256.
func BaseSeqID(seq string) string { return SHA256Hex(seq)[:SeqIDBaseLen] }

// CandidateSeqID is the n-th id tried for a new sequence whose base id is
// base: base itself for n = 0, then base_1, base_2, … (WIRE §8).
func CandidateSeqID(base string, n int) string {
	if n == 0 {
		return base
	}
	return base + "_" + strconv.Itoa(n)
}

// ValidSeqID reports whether id is safe to use as a file name inside a cache
// folder: non-empty, at most MaxSeqIDLen bytes, no path separator, no "..",
// no leading dot (hidden and temp files start with one), no control or
// whitespace characters. Ids imported from legacy maps need not follow the
// hash rule, so this checks safety, not shape.
func ValidSeqID(id string) bool {
	if id == "" || len(id) > MaxSeqIDLen || id[0] == '.' || strings.Contains(id, "..") {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c <= ' ' || c == 0x7f || c == '/' || c == '\\' {
			return false
		}
	}
	return true
}

// MethodDMaxLen is the length method D's sequences are cut to before mapping
// (WIRE §8: ESM-1b's 1022-residue window).
const MethodDMaxLen = 1022

// NormaliseSequences applies the planner's normalisation (WIRE §8 backend
// usage) for a method with the given planner profile: trim surrounding
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
