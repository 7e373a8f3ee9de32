package seqid

import (
	"strings"
	"testing"
)

func TestSeqIDAlgorithm(t *testing.T) {
	// sha256("MKT") computed independently with `printf MKT | sha256sum`.
	const want = "366893d2245f5f241af2eeba0a8c19ef3bf362141a7c8504d7479ce7e7f2fb66"
	got := SHA256Hex("MKT")
	if got != want {
		t.Fatalf("SHA256Hex = %q, want %q", got, want)
	}
	if Base("MKT") != "366893d2245f" {
		t.Errorf("Base = %q", Base("MKT"))
	}
	if Base("mkt") == Base("MKT") || Base(" MKT") == Base("MKT") {
		t.Error("hash must be case- and whitespace-sensitive")
	}
	if Candidate("abc", 0) != "abc" || Candidate("abc", 2) != "abc_2" {
		t.Error("Candidate")
	}
}

func TestValid(t *testing.T) {
	good := []string{"0123456789ab", "0123456789ab_1", "P12345", "seq-1.v2", "a", strings.Repeat("a", 128), "sp|P1|X"}
	bad := []string{"", ".", "..", "../etc", "a/../../b", "/abs", "a/b", `a\b`, ".hidden", "a..b", "x\x00y", "sp ace",
		"tab\t", "new\nline", strings.Repeat("a", 129), "\x7f"}
	for _, id := range good {
		if !Valid(id) {
			t.Errorf("Valid(%q) = false", id)
		}
	}
	for _, id := range bad {
		if Valid(id) {
			t.Errorf("Valid(%q) = true", id)
		}
	}
}
