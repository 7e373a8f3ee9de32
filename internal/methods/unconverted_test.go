package methods

import (
	"context"
	"testing"
)

// fakeChem converts nothing: it answers the texts as given and says
// whether it "did" the conversion (ok).
type fakeChem struct{ ok bool }

func (f fakeChem) Convert(_ context.Context, _ SubstrateForm, texts []string) ([]string, bool, error) {
	return texts, f.ok, nil
}

// TestUnconvertedReported: a dedicated contract whose substrates the
// chemistry helper could not convert tells the caller (the prediction
// cache must not keep values made from unconverted text); a converted one
// does not.
func TestUnconvertedReported(t *testing.T) {
	cat := Default()
	for _, key := range []string{"C", "D"} {
		d, _ := cat.Get(key)
		kw := map[string]string{}
		for _, ck := range d.ColToKwarg {
			kw[ck.Kwarg] = "CCO"
		}
		for _, helperOK := range []bool{true, false} {
			called := false
			req := CommandRequest{JobID: "j1", Target: string(d.Supports[0]), Canonicalize: true, Dir: t.TempDir(),
				Rows: []EngineRow{{Seq: "MKT", Kwargs: kw}}, Chem: fakeChem{ok: helperOK}, Unconverted: func() { called = true }}
			if _, err := writeEngineInput(context.Background(), d, req); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			if called == helperOK {
				t.Errorf("%s: helper converted %v, Unconverted called %v", key, helperOK, called)
			}
		}
	}
}
