package input

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNameCharacters(t *testing.T) {
	got := strings.Join(NameCharacters("MK1TZ1\tm é"), "; ")
	want := `'1' at position 3; 'Z' at position 5; '\t' at position 7; 'm' at position 8 (lowercase; write M); ' ' at position 9 (a space); 'é' at position 10`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if n := NameCharacters("ACDEFGHIKLMNPQRSTVWY"); n != nil {
		t.Fatalf("valid sequence named %v", n)
	}
}

// TestBuildMessagesOrderAndRestrict: rows in order (Protein Sequence before
// the substrate column within a row), then the methods still listed after
// RestrictTo, then the server's limit.
func TestBuildMessagesOrderAndRestrict(t *testing.T) {
	one, two, lim, big := 1, 2, 1000, 10000
	rep := &ValidateReport{
		InvalidSubstrates: []SubstrateIssue{{Row: 3, Value: "X", Reason: ReasonInvalidSMILES, InvalidComponents: []string{"X"}}, {Row: 1, Value: "NaN", Reason: ReasonInvalidSMILES}},
		InvalidProteins:   []ProteinIssue{{Row: 3, Value: "", Reason: ReasonEmptySequence}, {Row: 2, Value: "MKZ", Reason: ReasonInvalidChars}},
		LengthViolations:  OrderedInts{{Key: "B", Value: &two}, {Key: "C", Value: &one}, {Key: "Server", Value: &one}},
		LengthLimits:      OrderedInts{{Key: "B", Value: &lim}, {Key: "C", Value: &lim}, {Key: "Server", Value: &big}},
	}
	rep.RestrictTo([]string{"C"})
	var texts []string
	for _, m := range BuildMessages(rep) {
		texts = append(texts, m.Text)
	}
	want := []string{
		"Row 1, Substrate: the cell is empty.",
		"Row 2, Protein Sequence: 1 character is not an amino acid: 'Z' at position 3. Allowed: the 20 amino acids ACDEFGHIKLMNPQRSTVWY, uppercase.",
		"Row 3, Protein Sequence: the sequence is empty.",
		`Row 3, Substrate: not a valid SMILES or InChI: "X".`,
		"Method C: 1 sequence is longer than its limit of 1000 residues (shortened to their first and last halves, or left out with handleLongSequences=skip).",
		"1 sequence is longer than the server limit of 10000 residues (shortened to their first and last halves, or left out with handleLongSequences=skip).",
	}
	if strings.Join(texts, "\n") != strings.Join(want, "\n") {
		t.Fatalf("messages:\n%s\nwant:\n%s", strings.Join(texts, "\n"), strings.Join(want, "\n"))
	}
}

// FuzzNameCharacters: every character outside the alphabet is named once,
// at the position (in characters) where it first appears.
func FuzzNameCharacters(f *testing.F) {
	for _, s := range []string{"MK1TZ", "m k\t", "ÄÖ", "\xff\xfe", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seq string) {
		named := NameCharacters(seq)
		bad := InvalidResidues(seq)
		if len(named) != len(bad) {
			t.Fatalf("%q: %d named, %d invalid", seq, len(named), len(bad))
		}
		if len(named) > utf8.RuneCountInString(seq) {
			t.Fatalf("%q: more names than characters", seq)
		}
	})
}
