package main

import (
	"log/slog"
	"path/filepath"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/similarity"
)

// newSimilarity wires the similarity analysis: the catalogue's datasets
// with their FASTA paths resolved under the media root, and builds under
// MEDIA/similarity.
func newSimilarity(cfg *config.Config, cat *methods.Catalogue, log *slog.Logger) *similarity.Service {
	var ds []similarity.Dataset
	for _, d := range cat.SimilarityDatasets() {
		ds = append(ds, similarity.Dataset{Label: d.Label, FASTA: d.ResolveFASTA(cfg.MediaRoot), Methods: d.Methods})
	}
	s := &similarity.Searcher{Root: filepath.Join(cfg.MediaRoot, "similarity"), Mmseqs: cfg.Mmseqs,
		Threads: cfg.SimilarityThreads, Index: cfg.SimilarityIndex, Log: log}
	return similarity.NewService(s, ds, cfg.SimilarityValidateTimeout)
}
