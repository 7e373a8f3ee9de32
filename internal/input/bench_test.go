package input

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
)

// benchCSV is a 10,000-row upload of 1,000-residue sequences with 200
// distinct substrates: a job at the row limit.
func benchCSV() []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	subs := make([]string, 200)
	for i := range subs {
		subs[i] = "CC(=O)O" + strings.Repeat("C", i%20) + "N"
	}
	var b bytes.Buffer
	b.WriteString("Protein Sequence,Substrate,Note\n")
	seq := make([]byte, 1000)
	for r := 0; r < DefaultMaxRows; r++ {
		for i := range seq {
			seq[i] = AminoAcids[rng.IntN(len(AminoAcids))]
		}
		b.Write(seq)
		b.WriteByte(',')
		b.WriteString(subs[r%len(subs)])
		b.WriteString(",row\n")
	}
	return b.Bytes()
}

func benchParseValidate(b *testing.B, chem *Chemistry) {
	data := benchCSV()
	cat := methodsDefault()
	raw := RawOptions{fields: map[string]any{"targets": []any{"kcat"}, "methods": map[string]any{"kcat": "B"}}}
	ctx := context.Background()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s, err := ValidateSubmit(cat, raw, func() (*Table, error) { return ParseCSV(bytes.NewReader(data), DefaultMaxRows) })
		if err != nil {
			b.Fatal(err)
		}
		rep, err := Validate(ctx, cat, chem, s.Table, false)
		if err != nil || rep.RowCount != DefaultMaxRows {
			b.Fatal(err)
		}
		if _, err := ValidateRows(ctx, chem, InfoOf(mustGet(b, "B")), s.Table, s.Table.Column(ColProteinSequence)); err != nil {
			b.Fatal(err)
		}
	}
}

func mustGet(b *testing.B, key string) *methodsDescriptor {
	d, ok := methodsDefault().Get(key)
	if !ok {
		b.Fatal(key)
	}
	return d
}

// BenchmarkParseValidate10k: ParseCSV + the submit pipeline + the /validate/
// report + run-time row validation of a 10,000-row, 1,000-residue CSV.
func BenchmarkParseValidate10k(b *testing.B) {
	b.Run("go-checks", func(b *testing.B) { benchParseValidate(b, NewChemistry(nil, nil)) })
	b.Run("rdkit", func(b *testing.B) {
		if err := exec.Command(DefaultPython, "-c", "import rdkit").Run(); err != nil {
			b.Skip("RDKit not installed")
		}
		rd := NewRDKit(RDKitOptions{})
		defer rd.Close()
		if _, err := rd.Probe(context.Background()); err != nil {
			b.Fatal(err)
		}
		benchParseValidate(b, NewChemistry(rd, nil))
	})
}

// BenchmarkParseCSV10k is the CSV parse alone.
func BenchmarkParseCSV10k(b *testing.B) {
	data := benchCSV()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseCSV(bytes.NewReader(data), DefaultMaxRows); err != nil {
			b.Fatal(err)
		}
	}
}
