package input

import (
	"sort"
	"unicode/utf8"
)

// AminoAcids is the residue alphabet every engine accepts: the 20
// standard amino acids, uppercase only.
const AminoAcids = "ACDEFGHIKLMNPQRSTVWY"

var aaTable = func() (t [256]bool) {
	for i := 0; i < len(AminoAcids); i++ {
		t[AminoAcids[i]] = true
	}
	return t
}()

// ValidResidues reports whether every character of seq is in AminoAcids.
// The empty string passes: callers that need a non-empty sequence check it.
func ValidResidues(seq string) bool {
	for i := 0; i < len(seq); i++ {
		if !aaTable[seq[i]] {
			return false
		}
	}
	return true
}

// InvalidResidues returns the sorted unique characters of seq outside the
// alphabet (sorted by code point, as Python's sorted() on a str).
func InvalidResidues(seq string) []string {
	seen := map[rune]bool{}
	var out []rune
	for _, r := range seq {
		if r < 256 && aaTable[r] {
			continue
		}
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	s := make([]string, len(out))
	for i, r := range out {
		s[i] = string(r)
	}
	return s
}

// SeqLen is a sequence's length in characters (Python len), not bytes.
func SeqLen(seq string) int {
	for i := 0; i < len(seq); i++ {
		if seq[i] >= utf8.RuneSelf {
			return utf8.RuneCountInString(seq)
		}
	}
	return len(seq)
}

// EffectiveLimit is a job's single length limit (docs/input.md, "The rules in order"):
// L = min(ServerLimit, min over the selected methods' max_seq_len), where 0
// means unlimited.
func EffectiveLimit(maxSeqLens ...int) int {
	l := ServerLimit
	for _, m := range maxSeqLens {
		if m > 0 && m < l {
			l = m
		}
	}
	return l
}

// TooLong reports whether seq is longer than limit (a strict >).
func TooLong(seq string, limit int) bool { return SeqLen(seq) > limit }

// Truncate shortens a sequence longer than limit to its first ⌊L/2⌋ plus its
// last ⌊L/2⌋ characters (length L−1 when L is odd); shorter sequences
// are returned unchanged.
func Truncate(seq string, limit int) string {
	n := SeqLen(seq)
	if n <= limit {
		return seq
	}
	half := limit / 2
	if n == len(seq) { // ASCII
		return seq[:half] + seq[len(seq)-half:]
	}
	r := []rune(seq)
	return string(r[:half]) + string(r[len(r)-half:])
}

// SkipTooLong is the skip reason of handleLongSequences=skip, verbatim (the
// dash is U+2014).
const SkipTooLong = "Sequence too long — row was excluded"

// LongSequence applies a job's long-sequence mode to one sequence: it
// returns the sequence the engines get and, for a skipped row, the skip
// reason. mode is LongTruncate or LongSkip.
func LongSequence(seq string, limit int, mode string) (out string, skipReason string) {
	if !TooLong(seq, limit) {
		return seq, ""
	}
	if mode == LongSkip {
		return seq, SkipTooLong
	}
	return Truncate(seq, limit), ""
}
