package methods

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// SimilarityDataset is one training set of the similarity analysis
// (docs/similarity.md, "Datasets"): its label (the key of /validate/'s similarity
// object), the FASTA of its sequences, and the methods it serves.
type SimilarityDataset struct {
	Label string `json:"label" yaml:"label"`
	// FASTA is a path relative to the media root, or absolute.
	FASTA   string   `json:"fasta" yaml:"fasta"`
	Methods []string `json:"methods" yaml:"methods"`
}

// DefaultSimilarityDatasets are the reference's datasets, with its 2026
// changes (method G's dataset also serves G-O2 and is
// labelled for both, as the reference's became "CatPred/OmniESI"; method I
// has one), each read from MEDIA/fastas/<slug>_sequences.fasta. Methods H and
// J have none.
func DefaultSimilarityDatasets() []SimilarityDataset {
	return []SimilarityDataset{
		{Label: "C", FASTA: "fastas/C_sequences.fasta", Methods: []string{"C"}},
		{Label: "F/A", FASTA: "fastas/F_A_sequences.fasta", Methods: []string{"F", "A-H", "A-L"}},
		{Label: "D", FASTA: "fastas/D_sequences.fasta", Methods: []string{"D"}},
		{Label: "B", FASTA: "fastas/B_sequences.fasta", Methods: []string{"B"}},
		{Label: "E", FASTA: "fastas/E_sequences.fasta", Methods: []string{"E"}},
		{Label: "G/G-O2", FASTA: "fastas/G_G-O2_sequences.fasta", Methods: []string{"G", "G-O2"}},
		{Label: "I", FASTA: "fastas/I_sequences.fasta", Methods: []string{"I"}},
	}
}

// SimilarityDatasets returns the catalogue's datasets in their configured
// order.
func (c *Catalogue) SimilarityDatasets() []SimilarityDataset {
	return slices.Clone(c.similarity)
}

// SimilarityDatasetFor returns the dataset that serves method key.
func (c *Catalogue) SimilarityDatasetFor(key string) (SimilarityDataset, bool) {
	for _, d := range c.similarity {
		if slices.Contains(d.Methods, key) {
			return d, true
		}
	}
	return SimilarityDataset{}, false
}

// ResolveFASTA returns the dataset's FASTA path with a relative path taken
// from mediaRoot.
func (d SimilarityDataset) ResolveFASTA(mediaRoot string) string {
	if filepath.IsAbs(d.FASTA) {
		return d.FASTA
	}
	return filepath.Join(mediaRoot, d.FASTA)
}

// validateSimilarity checks the datasets: labels unique and non-empty, a
// FASTA each, a method served by one dataset at most.
func validateSimilarity(list []SimilarityDataset) error {
	labels := map[string]bool{}
	served := map[string]string{}
	for i, d := range list {
		if strings.TrimSpace(d.Label) == "" {
			return fmt.Errorf("similarity[%d]: missing label", i)
		}
		if labels[d.Label] {
			return fmt.Errorf("similarity: duplicate label %q", d.Label)
		}
		labels[d.Label] = true
		if strings.TrimSpace(d.FASTA) == "" || strings.Contains(d.FASTA, "..") {
			return fmt.Errorf("similarity %q: want a fasta path that does not contain \"..\"", d.Label)
		}
		for _, m := range d.Methods {
			if other, ok := served[m]; ok {
				return fmt.Errorf("similarity: method %q is served by both %q and %q", m, other, d.Label)
			}
			served[m] = d.Label
		}
	}
	return nil
}

// renameSimilarity maps the datasets' method keys through the file's renames.
func renameSimilarity(list []SimilarityDataset, rename map[string]string) []SimilarityDataset {
	out := make([]SimilarityDataset, len(list))
	for i, d := range list {
		d.Methods = slices.Clone(d.Methods)
		for j, m := range d.Methods {
			if n, ok := rename[m]; ok {
				d.Methods[j] = n
			}
		}
		out[i] = d
	}
	return out
}
