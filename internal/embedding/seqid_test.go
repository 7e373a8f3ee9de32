package embedding

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kinflow/kinflow/internal/methods"
)

func TestNormaliseSequences(t *testing.T) {
	in := []string{"  MKT\n", "", "   ", "MKT", "mkt", "ACD"}
	if got, want := NormaliseSequences(methods.ProfileProtT5Mean, in), []string{"MKT", "mkt", "ACD"}; !reflect.DeepEqual(got, want) {
		t.Errorf("generic = %v, want %v", got, want)
	}
	long := strings.Repeat("a", 1500)
	got := NormaliseSequences(methods.ProfileMethodDESM1b, append(in, long, strings.ToUpper(long[:1022])+"QQ"))
	if want := []string{"MKT", "ACD", strings.Repeat("A", 1022)}; !reflect.DeepEqual(got, want) {
		t.Errorf("method D = %v", got)
	}
	if got := NormaliseSequences(methods.ProfileMethodDESM1b, []string{strings.Repeat("é", 1100)}); utf8.RuneCountInString(got[0]) != 1022 || !utf8.ValidString(got[0]) {
		t.Errorf("method D cut must count characters")
	}
}

func TestParseSequenceFile(t *testing.T) {
	fasta := "\ufeff>sp|P1 first\nMKT\n  ACD  \n\n>second\r\nQQQ\r\n>empty\n"
	got, err := ParseSequenceFile(strings.NewReader(fasta))
	if err != nil || !reflect.DeepEqual(got, []string{"MKTACD", "QQQ", ""}) {
		t.Errorf("FASTA = %q, %v", got, err)
	}
	csv := "Substrate,Protein Sequence,Note\nCCO, MKT ,x\n\"C,C\",\"AC\nD\",y\nshort\n"
	got, err = ParseSequenceFile(strings.NewReader(csv))
	if err != nil || !reflect.DeepEqual(got, []string{" MKT ", "AC\nD", ""}) {
		t.Errorf("CSV = %q, %v", got, err)
	}
	if _, err := ParseSequenceFile(strings.NewReader("A,B\n1,2\n")); !errors.Is(err, ErrNoSequenceColumn) {
		t.Errorf("no column: %v", err)
	}
	if _, err := ParseSequenceFile(strings.NewReader("")); !errors.Is(err, ErrNoSequenceColumn) {
		t.Errorf("empty: %v", err)
	}
	if _, err := ParseFASTA(strings.NewReader("MKT\n>x\nA\n")); err == nil {
		t.Error("sequence before header accepted")
	}
}

func FuzzParseSequenceFile(f *testing.F) {
	f.Add([]byte(">a\nMKT\n>b\nACD\n"))
	f.Add([]byte("Protein Sequence,Substrate\nMKT,CCO\n"))
	f.Add([]byte("\"Protein Sequence\"\n\"A\"\"B\"\n"))
	f.Add([]byte(">x\r\n\r\n;comment\nAC D\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		seqs, err := ParseSequenceFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		trimmed := bytes.TrimLeft(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")), " \t\r\n")
		for _, s := range seqs {
			if len(s) > len(data) {
				t.Fatalf("sequence longer than the input")
			}
			if len(trimmed) > 0 && trimmed[0] == '>' && strings.ContainsAny(s, "\n\r") {
				t.Fatalf("FASTA sequence %q holds a line break", s)
			}
		}
		// The mapping of whatever was parsed must give safe ids.
		for _, s := range NormaliseSequences(methods.ProfileMethodDESM1b, seqs) {
			if id := BaseSeqID(s); !ValidSeqID(id) || !ValidSeqID(CandidateSeqID(id, 7)) {
				t.Fatalf("unsafe id %q", id)
			}
		}
	})
}

func FuzzSeqIDMapping(f *testing.F) {
	f.Add("MKT", "../x")
	f.Add(" mkt ", ".hidden")
	f.Add("", "a/b")
	f.Fuzz(func(t *testing.T, seq, id string) {
		base := BaseSeqID(seq)
		if len(base) != SeqIDBaseLen || !ValidSeqID(base) || base != SHA256Hex(seq)[:12] {
			t.Fatalf("base %q", base)
		}
		norm := NormaliseSequences("", []string{seq, seq})
		if len(norm) > 1 {
			t.Fatalf("duplicates kept: %q", norm)
		}
		if len(norm) == 1 && norm[0] != strings.TrimSpace(seq) {
			t.Fatalf("normalised %q to %q", seq, norm[0])
		}
		// Whatever an id holds, a valid one never leaves its folder.
		l := &Layout{MediaRoot: "/media"}
		f, _ := FamilyByName(FamilyESM1v)
		p, err := l.Path(f, id)
		if ValidSeqID(id) != (err == nil) {
			t.Fatalf("Path(%q) err %v", id, err)
		}
		if err == nil && (!strings.HasPrefix(p, "/media/sequence_info/esm1v/") || strings.Count(p[len("/media/sequence_info/esm1v/"):], "/") != 0 || strings.Contains(p, "/../")) {
			t.Fatalf("Path(%q) = %q escapes", id, p)
		}
	})
}
