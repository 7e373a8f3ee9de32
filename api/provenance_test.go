package api

import (
	"encoding/json"
	"testing"

	"github.com/kinflow/kinflow/internal/provenance"
)

func TestWithProvenanceAppendsKeys(t *testing.T) {
	body, err := resultJSON("j1", []byte("kcat (1/s),Source kcat\n1.5,Prediction from Method B\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	p := jobProvenance{Stages: []provenance.Stage{{Method: "B", ModelVersion: "1", Engine: "command", EngineFingerprint: "fp-1",
		Families: map[string]string{"prot_t5_last/mean_vecs": "fp-2"}}}, Notice: "n"}
	out := withProvenance(body, p)
	var doc struct {
		JobID      string             `json:"jobId"`
		RowCount   int                `json:"rowCount"`
		Provenance []provenance.Stage `json:"provenance"`
		Notice     string             `json:"notice"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if doc.JobID != "j1" || doc.RowCount != 1 || len(doc.Provenance) != 1 || doc.Provenance[0].Families["prot_t5_last/mean_vecs"] != "fp-2" || doc.Notice != "n" {
		t.Fatalf("%s", out)
	}
	// The original body is left as it was.
	if !json.Valid(body) || len(body) >= len(out) {
		t.Fatalf("body changed: %s", body)
	}
}
