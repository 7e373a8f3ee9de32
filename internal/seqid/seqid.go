// Package seqid is the sequence-id algorithm (docs/embedding.md, "Sequence
// ids"), the reference's, so its caches stay reusable: a sequence's id is
// the first BaseLen hex characters of its SHA-256, with _1, _2, … appended
// on a collision, and an id is safe as a file name when Valid says so.
//
// It stands alone, below internal/store (which assigns ids) and
// internal/embedding (which names cache files by them).
package seqid

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// BaseLen is the number of hex characters of a sequence's SHA-256 that
// form its base seq id.
const BaseLen = 12

// MaxLen bounds a seq id. Ids become file names; 128 leaves room for
// suffixes and temp names under every file system's 255-byte name limit.
const MaxLen = 128

// SHA256Hex is the lowercase hex SHA-256 of the sequence's bytes, hashed
// exactly as given (case-sensitive, no trimming).
func SHA256Hex(seq string) string {
	sum := sha256.Sum256([]byte(seq))
	return hex.EncodeToString(sum[:])
}

// Base is the first BaseLen hex characters of the sequence's SHA-256.
func Base(seq string) string { return SHA256Hex(seq)[:BaseLen] }

// Candidate is the n-th id tried for a new sequence whose base id is base:
// base itself for n = 0, then base_1, base_2, …
func Candidate(base string, n int) string {
	if n == 0 {
		return base
	}
	return base + "_" + strconv.Itoa(n)
}

// Valid reports whether id is safe to use as a file name inside a cache
// folder: non-empty, at most MaxLen bytes, no path separator, no "..", no
// leading dot (hidden and temp files start with one), no control or
// whitespace characters. Ids imported from legacy maps need not follow the
// hash rule, so this checks safety, not shape.
func Valid(id string) bool {
	if id == "" || len(id) > MaxLen || id[0] == '.' || strings.Contains(id, "..") {
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
