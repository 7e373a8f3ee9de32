package predcache

import (
	"encoding/hex"
	"testing"
)

// TestKeyLayoutIsPinned: the bytes a key is made of are part of the stored
// cache. A change of layout must come with a new keyVersion; this pins the
// key of one unit so that a silent change fails here.
func TestKeyLayoutIsPinned(t *testing.T) {
	k := NewKeyer(Stage{
		Target: "Km", Method: "C", ModelVersion: "1", EngineFingerprint: "fp-engine",
		Families:  map[string]string{"prot_t5_last/mean_vecs": "fp-t5", "esm2_layer_26/mean_vecs": "fp-esm"},
		FixedArgs: `{"kinetics_type":"KM"}`, Canonicalize: true,
	}).Key(Unit{Seq: "MKTAYIAK", Substrates: []string{"CCO", "C(=O)O"}, Products: nil, Kwargs: map[string]string{"b": "2", "a": "1"}})
	const want = "30c30f04439e2043ca5b7ffc955aebec4f9af680d094f1302fe56c601a554be1"
	if got := hex.EncodeToString(k[:]); got != want {
		t.Fatalf("key %s, want %s: the key layout changed; bump keyVersion and update this value", got, want)
	}
}
