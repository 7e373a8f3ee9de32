package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// submitted creates a job through the API and returns its id.
func (h *harness) submitted(ip, key string, fields ...string) string {
	h.t.Helper()
	if len(fields) == 0 {
		fields = []string{"targets", `["kcat","Km"]`, "methods", `{"kcat":"B","Km":"E"}`}
	}
	r := h.submitCSV(ip, key, csvRows(2), fields...)
	if r.Code != 201 {
		h.t.Fatalf("submit: %d %s", r.Code, r.Body)
	}
	return r.json(h.t)["jobId"].(string)
}

func TestStatusPendingShape(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "203.0.113.30"
		key := h.newKey(ip)
		first := h.submitted(ip, key)
		h.clock.Set(t0.Add(2 * time.Second))
		id := h.submitted(ip, key)
		h.clock.Set(t0.Add(7*time.Second + 500*time.Millisecond))
		r := h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil)
		wantStatus(t, r, 200)
		var keys []string
		dec := json.NewDecoder(strings.NewReader(r.Body.String()))
		dec.Token()
		for dec.More() {
			k, _ := dec.Token()
			keys = append(keys, k.(string))
			var skip json.RawMessage
			dec.Decode(&skip)
		}
		want := "jobId,status,submittedAt,elapsedSeconds,queueSeconds,computeSeconds,queuePosition,progress,progressStages,activeStageIndex,completedStageCount,totalStageCount,overall,sharing" // overall and sharing: kinflow's additions, last
		if strings.Join(keys, ",") != want {
			t.Fatalf("keys %v", keys)
		}
		b := r.json(t)
		if b["status"] != "Pending" || b["submittedAt"] != "2026-03-04T14:30:02.123456+00:00" || b["elapsedSeconds"] != 5.0 ||
			b["queueSeconds"] != 5.0 || b["computeSeconds"] != nil || b["queuePosition"] != 2.0 || b["activeStageIndex"] != 0.0 ||
			b["totalStageCount"] != 2.0 || b["completedStageCount"] != 0.0 {
			t.Fatalf("status %v", b)
		}
		// Both jobs are one key's: none of its own work counts as shared.
		if sh := b["sharing"].(map[string]any); sh["class"] != "interactive" || sh["otherKeys"] != 0.0 || sh["otherRows"] != 0.0 {
			t.Fatalf("sharing %v", sh)
		}
		stages := b["progressStages"].([]any)
		s0 := stages[0].(map[string]any)
		if s0["method_key"] != "B" || s0["methodName"] != "Method B" || s0["status"] != "pending" || s0["started_at"] != nil {
			t.Fatalf("stage %v", s0)
		}
		if !strings.Contains(r.Body.String(), `"embedding":{"enabled":true,"state":"pending","methodKey":"E","method_key":"E","target":"Km","total":0,"cachedAlready":0,"cached_already":0,"needComputation":0,"need_computation":0,"computed":0,"remaining":0,"updatedAt":null}`) {
			t.Fatalf("progress.embedding: %s", r.Body)
		}
		if !strings.Contains(r.Body.String(), `"prediction":{"molecules_total":0,"molecules_processed":0,"invalid_rows":0,"predictions_total":0,"predictions_made":0,"moleculesTotal":0,`) {
			t.Fatalf("stage prediction: %s", r.Body)
		}
		// The first job is ahead; once it is Processing, the second is first.
		st.DB.Model(&store.Job{}).Where("id = ?", first).Update("status", "Processing")
		if r := h.do("POST", "/api/v1/status/"+id, ip, key, nil); r.json(t)["queuePosition"] != 1.0 {
			t.Fatalf("any method, no slash: %s", r.Body)
		}
	})
}

func TestStatusProcessingCompletedFailed(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "203.0.113.31"
		key := h.newKey(ip)
		id := h.submitted(ip, key)
		started := t0.Add(12 * time.Second)
		st.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"status": "Processing", "started_at": started,
			"total_molecules": 50, "molecules_processed": 50, "total_predictions": 48, "predictions_made": 20, "invalid_rows": 2})
		done := started.Add(38 * time.Second)
		st.DB.Model(&store.JobStage{}).Where("job_id = ? AND stage_index = 0", id).Updates(map[string]any{"status": "completed",
			"started_at": started, "completed_at": done, "embedding_state": "done", "embedding_total": 4, "embedding_cached": 4})
		emb := started.Add(83 * time.Second)
		st.DB.Model(&store.JobStage{}).Where("job_id = ? AND stage_index = 1", id).Updates(map[string]any{"status": "running",
			"started_at": done, "embedding_state": "done", "embedding_total": 40, "embedding_cached": 30, "embedding_need": 10,
			"embedding_computed": 10, "embedding_updated_at": emb})
		for i, e := range []store.JobEvent{
			{MethodKey: "B", Target: "kcat", Completed: true, Reason: "cache_complete"},
			{StageIndex: 1, MethodKey: "E", Target: "Km", Attempted: true, UsedGPU: true, Completed: false, Failed: true, Reason: "failed"},
			{StageIndex: 1, MethodKey: "E", Target: "Km", Attempted: true, UsedGPU: true, Completed: true, Reason: "done"},
		} {
			e.JobID, e.Kind, e.CreatedAt = id, store.EventGPUPrecompute, started.Add(time.Duration(i+1)*time.Second)
			if err := st.DB.Create(&e).Error; err != nil {
				t.Fatal(err)
			}
		}
		st.DB.Create(&store.JobEvent{JobID: id, Kind: "stage_started", CreatedAt: started})
		h.clock.Set(t0.Add(95 * time.Second))
		r := h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil)
		wantStatus(t, r, 200)
		b := r.json(t)
		if b["elapsedSeconds"] != 95.0 || b["queueSeconds"] != 12.0 || b["computeSeconds"] != 83.0 || b["queuePosition"] != nil ||
			b["activeStageIndex"] != 1.0 || b["completedStageCount"] != 1.0 || b["completedAt"] != nil || b["error"] != nil {
			t.Fatalf("processing %v", b)
		}
		p := b["progress"].(map[string]any)
		if p["moleculesTotal"] != 50.0 || p["predictionsMade"] != 20.0 || p["invalidRows"] != 2.0 {
			t.Fatalf("progress %v", p)
		}
		if _, ok := b["charge"]; ok {
			t.Fatalf("a running job has no charge yet: %v", b["charge"])
		}
		e := p["embedding"].(map[string]any)
		if e["methodKey"] != "E" || e["needComputation"] != 10.0 || e["remaining"] != 0.0 || e["updatedAt"] != "2026-03-04T14:31:35.123456+00:00" {
			t.Fatalf("embedding %v", e)
		}
		g := b["gpuPrecompute"].(map[string]any)
		if g["methodKey"] != "E" || g["attempted"] != true || g["usedGpu"] != true || g["used_gpu"] != true || g["completed"] != true ||
			g["failed"] != true || g["reason"] != "done" || len(g["events"].([]any)) != 3 {
			t.Fatalf("gpuPrecompute %v", g)
		}
		if !strings.Contains(r.Body.String(), `"gpuPrecompute":{"methodKey":"E","method_key":"E","target":"Km","attempted":true,"usedGpu":true,"used_gpu":true,"completed":true,"failed":true,"reason":"done","updatedAt":"2026-03-04T14:30:15.123456+00:00","events":[{"methodKey":"B"`) {
			t.Fatalf("gpuPrecompute order: %s", r.Body)
		}

		end := t0.Add(100 * time.Second)
		st.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"status": "Completed", "completed_at": end})
		h.clock.Set(t0.Add(time.Hour))
		b = h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil).json(t)
		if b["elapsedSeconds"] != 100.0 || b["computeSeconds"] != 88.0 || b["completedAt"] != "2026-03-04T14:31:40.123456+00:00" ||
			b["resultUrl"] != "/api/v1/result/"+id+"/" || b["error"] != nil {
			t.Fatalf("completed %v", b)
		}
		// A finished job says what it cost: rows charged and refunded, and
		// how many of them were refunded for coming from the prediction cache.
		if ch, _ := b["charge"].(map[string]any); ch == nil || ch["rowsCharged"] != 2.0 || ch["rowsRefunded"] != 0.0 || ch["cachedRowsRefunded"] != 0.0 {
			t.Fatalf("charge %v", b["charge"])
		}
		st.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"requested_rows": 50, "refunded_rows": 48, "refunded_cached_rows": 40})
		if ch := h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil).json(t)["charge"].(map[string]any); ch["rowsCharged"] != 50.0 ||
			ch["rowsRefunded"] != 48.0 || ch["cachedRowsRefunded"] != 40.0 {
			t.Fatalf("charge %v", ch)
		}
		st.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"status": "Failed", "error_message": ""})
		b = h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil).json(t)
		if b["error"] == nil || b["error"] == "" || b["resultUrl"] != nil || b["completedAt"] != nil {
			t.Fatalf("failed %v", b)
		}
		st.DB.Model(&store.Job{}).Where("id = ?", id).Update("error_message", "Method B prediction failed.")
		if b = h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil).json(t); b["error"] != "Method B prediction failed." {
			t.Fatalf("failed %v", b)
		}
	})
}

func TestOwnershipAndUnknown(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		keyA := h.newKey("203.0.113.40")
		keyB := h.newKey("203.0.113.41")
		id := h.submitted("203.0.113.40", keyA)
		st.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"status": "Completed", "output_path": "jobs/" + id + "/output.csv"})
		for _, path := range []string{"/api/v1/status/", "/api/v1/result/"} {
			other := h.do("GET", path+id+"/", "203.0.113.41", keyB, nil)
			unknown := h.do("GET", path+"NoSuchJob0000000000000/", "203.0.113.41", keyB, nil)
			wantStatus(t, other, 404)
			wantStatus(t, unknown, 404)
			if other.json(t)["error"] != "No job found with id '"+id+"'." {
				t.Fatalf("other key: %s", other.Body)
			}
			// Bad slugs are a JSON 404 too.
			wantStatus(t, h.do("GET", path+"bad.id/", "203.0.113.41", keyB, nil), 404)
			wantStatus(t, h.do("GET", path+"a/b/", "203.0.113.41", keyB, nil), 404)
		}
	})
}

func TestResult(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "203.0.113.50"
		key := h.newKey(ip)
		id := h.submitted(ip, key)
		r := h.do("GET", "/api/v1/result/"+id+"/", ip, key, nil)
		wantStatus(t, r, 409)
		if !strings.Contains(r.json(t)["error"].(string), "Pending") {
			t.Fatalf("%s", r.Body)
		}
		csv := "kcat (1/s),Source kcat,Extra Info kcat,Protein Sequence,Substrate,n\n" +
			"12.345,Prediction from Method B,,MKT,CCO,1\n" +
			",Invalid protein sequence (unsupported amino acid characters),,M1,\"C,O\",2\n" +
			"1e-05,Prediction from Method B,,MKV,O,\n"
		out := filepath.Join(h.cfg.MediaRoot, "jobs", id, "output.csv")
		if err := os.WriteFile(out, []byte(csv), 0o644); err != nil {
			t.Fatal(err)
		}
		st.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"status": "Failed"})
		wantStatus(t, h.do("GET", "/api/v1/result/"+id+"/", ip, key, nil), 409)
		st.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"status": "Completed"})
		wantStatus(t, h.do("GET", "/api/v1/result/"+id+"/", ip, key, nil), 500) // no output recorded
		st.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"output_path": "jobs/" + id + "/output.csv",
			"requested_rows": 3, "refunded_rows": 2, "refunded_cached_rows": 1})

		r = h.do("GET", "/api/v1/result/"+id, ip, key, nil)
		wantStatus(t, r, 200)
		if r.Body.String() != csv || r.Header().Get("Content-Type") != "text/csv" ||
			r.Header().Get("Content-Disposition") != `attachment; filename="kinflow-`+id+`-results.csv"` ||
			r.Header().Get("Content-Length") != strconv.Itoa(len(csv)) || r.Header().Get("X-RateLimit-Limit") != "20000" {
			t.Fatalf("csv %v %q", r.Header(), r.Body)
		}
		r = h.do("GET", "/api/v1/result/"+id+"/?format=json", ip, key, nil)
		wantStatus(t, r, 200)
		want := `{"jobId":"` + id + `","columns":["kcat (1/s)","Source kcat","Extra Info kcat","Protein Sequence","Substrate","n"],"rowCount":3,"data":[` +
			`{"kcat (1/s)":12.345,"Source kcat":"Prediction from Method B","Extra Info kcat":null,"Protein Sequence":"MKT","Substrate":"CCO","n":1},` +
			`{"kcat (1/s)":null,"Source kcat":"Invalid protein sequence (unsupported amino acid characters)","Extra Info kcat":null,"Protein Sequence":"M1","Substrate":"C,O","n":2},` +
			`{"kcat (1/s)":0.00001,"Source kcat":"Prediction from Method B","Extra Info kcat":null,"Protein Sequence":"MKV","Substrate":"O","n":null}],` +
			`"charge":{"rowsCharged":3,"rowsRefunded":2,"cachedRowsRefunded":1}}`
		if r.Body.String() != want {
			t.Fatalf("json\n got %s\nwant %s", r.Body, want)
		}
		// Only exactly "json" selects JSON.
		if r := h.do("GET", "/api/v1/result/"+id+"/?format=JSON", ip, key, nil); r.Header().Get("Content-Type") != "text/csv" {
			t.Fatalf("format=JSON: %v", r.Header())
		}
		os.Remove(out)
		r = h.do("GET", "/api/v1/result/"+id+"/", ip, key, nil)
		wantStatus(t, r, 500)
		if msg := r.json(t)["error"].(string); strings.Contains(msg, h.cfg.MediaRoot) || !strings.Contains(msg, "request id") {
			t.Fatalf("500 leaks or lacks request id: %s", msg)
		}
	})
}
