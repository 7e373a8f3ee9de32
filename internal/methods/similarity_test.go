package methods

import "testing"

func TestSimilarityDatasetsDefault(t *testing.T) {
	c := Default()
	for key, want := range map[string]string{"C": "C", "F": "F/A", "A-H": "F/A", "A-L": "F/A", "D": "D", "B": "B", "E": "E", "G": "G/G-O2", "G-O2": "G/G-O2", "I": "I"} {
		d, ok := c.SimilarityDatasetFor(key)
		if !ok || d.Label != want {
			t.Errorf("%s: dataset %q %v, want %q", key, d.Label, ok, want)
		}
	}
	for _, key := range []string{"H", "J"} {
		if _, ok := c.SimilarityDatasetFor(key); ok {
			t.Errorf("%s has a dataset", key)
		}
	}
	if got := c.SimilarityDatasets()[1].ResolveFASTA("/m"); got != "/m/fastas/F_A_sequences.fasta" {
		t.Errorf("resolve: %s", got)
	}
}

func TestSimilarityDatasetsFromFile(t *testing.T) {
	c, err := Parse([]byte("rename: {C: C2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := c.SimilarityDatasetFor("C2"); !ok || d.Label != "C" {
		t.Errorf("renamed method lost its dataset: %v %v", d, ok)
	}
	c, err = Parse([]byte("similarity:\n  - {label: mine, fasta: /data/train.fasta, methods: [G]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ds := c.SimilarityDatasets(); len(ds) != 1 || ds[0].ResolveFASTA("/m") != "/data/train.fasta" {
		t.Errorf("datasets %v", ds)
	}
	if _, ok := c.SimilarityDatasetFor("C"); ok {
		t.Error("the file's list did not replace the defaults")
	}
	for _, bad := range []string{
		"similarity: [{label: a, fasta: x.fa, methods: [B]}, {label: a, fasta: y.fa}]",
		"similarity: [{label: a, fasta: x.fa, methods: [B]}, {label: b, fasta: y.fa, methods: [B]}]",
		"similarity: [{label: a, fasta: ../x.fa}]",
		"similarity: [{fasta: x.fa}]",
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}
