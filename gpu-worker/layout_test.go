package gpuworker

import (
	"slices"
	"testing"

	"github.com/kinflow/kinflow/internal/embedding"
)

// The GPU host's own table and internal/embedding's layout agree on every
// step's files, so either can serve as the other's check.
func TestEmbeddingLayoutMatchesTable(t *testing.T) {
	media := t.TempDir()
	el, err := embedding.NewLayout(media, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ActiveSteps {
		if k == "methode_embed_kcat" || k == "methode_embed_km" {
			continue // needs checkpoints (TestMethodELayout)
		}
		a, err1 := EmbeddingLayout{L: el}.ExpectedPaths(k, "0123456789ab")
		b, err2 := TableLayout{MediaRoot: media}.ExpectedPaths(k, "0123456789ab")
		slices.Sort(a)
		slices.Sort(b)
		if err1 != nil || err2 != nil || !slices.Equal(a, b) {
			t.Errorf("%s: %v %v / %v %v", k, a, err1, b, err2)
		}
	}
	if _, err := (EmbeddingLayout{L: el}).ExpectedPaths("nope", "0123456789ab"); err == nil {
		t.Error("unknown step accepted")
	}
}
