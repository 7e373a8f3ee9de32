package e2e

import (
	"bytes"
	"context"
	"encoding/csv"
	"mime/multipart"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/kinflow/kinflow/internal/testenv"
)

// TestJobSimilarityAndExperimental runs a job with the similarity columns
// and experimental values through the real processes: the worker's
// TrainingSimilarity activity searches a training set with the real mmseqs,
// LookupExperimental matches the table, and the result carries both. The
// history is replayed against the current workflow code (and recorded with
// KINFLOW_RECORD_HISTORIES=1).
func TestJobSimilarityAndExperimental(t *testing.T) {
	if _, err := exec.LookPath("mmseqs"); err != nil {
		testenv.Unavailable(t, "mmseqs2 is not installed (Debian package mmseqs2)")
	}
	s := newStack(t, nil, nil)
	train := strings.Repeat("MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ", 4)
	other := strings.Repeat("WWPPGGHHCCWWPPGGHHCCAA", 5)
	const inchi = "InChI=1S/C2H6O/c1-2-3/h3H,2H2,1H3"
	write := func(rel, body string) {
		p := filepath.Join(s.media, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("fastas/B_sequences.fasta", ">t0\n"+train+"\n")
	write("experimental/kcat_experimental.csv", "substrate_inchi,protein_sequence,protein_ID,kcat_value,kcat_SD,from_brenda,from_sabio,from_uniprot\n\""+
		inchi+"\","+train+",P00330,42.0,1.5,0,0,1\n")

	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "input.csv")
	_, _ = fw.Write([]byte("Protein Sequence,Substrate\n" + train + ",\"" + inchi + "\"\n" + other + ",CCO\n"))
	for k, v := range map[string]string{"targets": `["kcat"]`, "methods": `{"kcat":"B"}`, "useExperimental": "true", "includeSimilarityColumns": "true"} {
		_ = mw.WriteField(k, v)
	}
	_ = mw.Close()
	var out struct {
		JobID string `json:"jobId"`
	}
	if code := s.do("POST", "/api/v1/submit/", &buf, mw.FormDataContentType(), &out); code != 201 {
		t.Fatalf("submit: %d", code)
	}
	if st := s.waitDone(out.JobID, 3*time.Minute); st.Status != "Completed" {
		t.Fatalf("job %s: %s", st.Status, st.Error)
	}
	rows, err := csv.NewReader(strings.NewReader(s.resultCSV(out.JobID))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rows[0], "|"); got != "kcat (1/s)|Source kcat|Extra Info kcat|Protein Sequence|Substrate|mean similarity to B training data|max similarity to B training data" {
		t.Fatalf("header %s", got)
	}
	if rows[1][0] != "42.0" || rows[1][1] != "UniProt" || !strings.HasPrefix(rows[1][2], "This is reported in UniProt for protein P00330. Standard deviation is 1.5. Prediction by Method B is ") {
		t.Errorf("experimental row: %q", rows[1][:3])
	}
	if rows[1][5] != "100.0" || rows[1][6] != "100.0" || rows[2][5] != "0.0" || rows[2][6] != "0.0" {
		t.Errorf("similarity cells: %q %q", rows[1][5:], rows[2][5:])
	}
	if rows[2][1] == "UniProt" {
		t.Error("the unmatched row got the experimental value")
	}
	// The status and the JSON result say what the columns hold, with the
	// unit.
	var note struct {
		Similarity struct {
			State, Unit, Message string
		} `json:"similarity"`
		ColumnNotes map[string]string `json:"columnNotes"`
	}
	s.do("GET", "/api/v1/status/"+out.JobID+"/", nil, "", &note)
	if n := note.Similarity; n.State != "done" || n.Unit != "% identity" ||
		!strings.HasPrefix(n.Message, "Similarity columns, in % identity (0–100): the mean and the highest MMseqs2 identity") ||
		!strings.Contains(n.Message, "method B (dataset B)") {
		t.Errorf("status similarity note %+v", n)
	}
	s.do("GET", "/api/v1/result/"+out.JobID+"/?format=json", nil, "", &note)
	if note.ColumnNotes["max similarity to B training data"] != note.Similarity.Message || len(note.ColumnNotes) != 2 {
		t.Errorf("columnNotes %v", note.ColumnNotes)
	}

	// Both annotations ran as steps of the job's workflow: activities, or,
	// for a small job like this one (KINFLOW_SMALL_JOB_ROWS), local
	// activities recorded as markers.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := s.tc.GetWorkflowHistory(ctx, "prediction:"+out.JobID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	seen := map[string]bool{}
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			seen[a.GetActivityType().GetName()] = true
		}
		if m := ev.GetMarkerRecordedEventAttributes(); m != nil && m.GetMarkerName() == "LocalActivity" {
			for _, p := range m.GetDetails()["data"].GetPayloads() {
				for _, name := range []string{"TrainingSimilarity", "LookupExperimental"} {
					if strings.Contains(string(p.GetData()), `"`+name+`"`) {
						seen[name] = true
					}
				}
			}
		}
	}
	if !seen["TrainingSimilarity"] || !seen["LookupExperimental"] {
		t.Errorf("activities scheduled: %v", seen)
	}
	s.replay("prediction:"+out.JobID, "prediction_similarity_experimental")
}
