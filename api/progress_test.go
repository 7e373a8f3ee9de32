package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// statusOverall is the part of /status/ these tests read.
type statusOverall struct {
	Overall struct {
		Percent    float64 `json:"percent"`
		ETASeconds *int64  `json:"etaSeconds"`
		Phase      string  `json:"phase"`
		Rows       int     `json:"rows"`
		Sequences  *int    `json:"sequences"`
		Stage      *int    `json:"stage"`
		Stages     int     `json:"stages"`
		Text       string  `json:"text"`
	} `json:"overall"`
	ProgressStages []struct {
		Rows              int     `json:"rows"`
		Sequences         *int    `json:"sequences"`
		SequencesEmbedded *int    `json:"sequencesEmbedded"`
		Percent           float64 `json:"percent"`
		Seconds           *int64  `json:"seconds"`
		Embedding         struct {
			Total int `json:"total"`
		} `json:"embedding"`
	} `json:"progressStages"`
	Similarity *struct {
		State   string   `json:"state"`
		Unit    string   `json:"unit"`
		Columns []string `json:"columns"`
		Message string   `json:"message"`
	} `json:"similarity"`
}

// statusOverall reads job id's /status/ as the key's owner.
func (h *harness) statusOverall(t *testing.T, id, ip, key string) statusOverall {
	t.Helper()
	r := h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil)
	wantStatus(t, r, 200)
	var s statusOverall
	if err := json.Unmarshal(r.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestStatusOverallProgress: /status/'s `overall` gives the whole job in
// rows and sequences, one percentage and an ETA, and the same state as one
// line; each stage says its rows, sequences (embedding files turned into
// sequences), percentage and duration. Queued, embedding and completed.
func TestStatusOverallProgress(t *testing.T) {
	st := testenv.OpenStore(t, store.SQLite)
	h := newHarness(t, st)
	const ip = "203.0.113.80"
	key := h.newKey(ip)
	id := h.submitted(ip, key) // 2 rows; kcat B, Km E
	get := func() statusOverall { t.Helper(); return h.statusOverall(t, id, ip, key) }

	q := get().Overall
	if q.Phase != "queued" || q.Percent != 0 || q.ETASeconds != nil || q.Rows != 2 || q.Stages != 2 || q.Text != "Queued, position 1: 2 rows." {
		t.Fatalf("queued: %+v", q)
	}

	// Early in a job (5 % after 30 s of compute) no ETA yet: no phase has a
	// measured rate.
	early := t0.Add(10 * time.Second)
	st.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"status": "Processing", "started_at": early})
	st.DB.Model(&store.JobStage{}).Where("job_id = ? AND stage_index = 0", id).Updates(map[string]any{"status": "running",
		"started_at": early, "embedding_state": "running", "embedding_total": 10, "embedding_need": 10, "embedding_computed": 2,
		"predictions_total": 2})
	h.clock.Set(early.Add(30 * time.Second))
	if o := get().Overall; o.Percent != 5 || o.ETASeconds != nil || strings.Contains(o.Text, "left") {
		t.Fatalf("early: %+v", o)
	}

	// Between the stages: stage 2 is starting.
	started := t0.Add(10 * time.Second)
	st.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"status": "Processing", "started_at": started})
	st.DB.Model(&store.JobStage{}).Where("job_id = ? AND stage_index = 0", id).Updates(map[string]any{"status": "completed",
		"started_at": started, "completed_at": started.Add(20 * time.Second)})
	h.clock.Set(started.Add(20 * time.Second))
	if o := get().Overall; o.Phase != "preparing" || o.Percent != 50 || *o.Stage != 2 ||
		o.Text != "50% · stage 2 of 2 (Km, Method E): starting · 2 rows." {
		t.Fatalf("between stages: %+v", o)
	}

	// Stage 1 done; stage 2 embedding: 4 of 10 missing files computed.
	st.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"status": "Processing", "started_at": started})
	st.DB.Model(&store.JobStage{}).Where("job_id = ? AND stage_index = 0", id).Updates(map[string]any{"status": "completed",
		"started_at": started, "completed_at": started.Add(20 * time.Second), "embedding_state": "done", "embedding_total": 12,
		"embedding_cached": 12, "predictions_total": 2, "predictions_made": 2, "molecules_total": 2})
	st.DB.Model(&store.JobStage{}).Where("job_id = ? AND stage_index = 1", id).Updates(map[string]any{"status": "running",
		"started_at": started.Add(20 * time.Second), "embedding_state": "running", "embedding_total": 40, "embedding_cached": 30,
		"embedding_need": 10, "embedding_computed": 4, "predictions_total": 2, "molecules_total": 2,
		"count_rows": 2, "count_units": 2, "count_sequences": 20})
	// Stage 2's plan recorded its counts in its row; stage 1 was planned by
	// a worker from before that, which wrote them to counts.json.
	work := filepath.Join(h.cfg.MediaRoot, "jobs", id, "work")
	writeFile(t, filepath.Join(work, "stage-0", "counts.json"), `{"rows":2,"sequences":1,"units":2}`)
	if _, err := os.Stat(filepath.Join(work, "stage-1", "counts.json")); !os.IsNotExist(err) {
		t.Fatalf("stage 2 has a counts.json: %v", err)
	}
	h.clock.Set(started.Add(60 * time.Second))
	s := get()
	o := s.Overall
	// Stage 1: 1; stage 2: half of 0.4 (embedding) + half of 0 (predictions).
	// No ETA: the embedding was seen once, so it has no rate yet.
	if o.Percent != 60 || o.Phase != "embedding" || o.ETASeconds != nil || o.Stage == nil || *o.Stage != 2 ||
		o.Sequences == nil || *o.Sequences != 20 {
		t.Fatalf("embedding: %+v", o)
	}
	if want := "60% · stage 2 of 2 (Km, Method E): embedding sequences, about 17 of 20 done · 2 rows."; o.Text != want {
		t.Fatalf("text %q, want %q", o.Text, want)
	}
	s1 := s.ProgressStages[1]
	if s1.Rows != 2 || *s1.Sequences != 20 || *s1.SequencesEmbedded != 17 || s1.Percent != 20 || *s1.Seconds != 40 || s1.Embedding.Total != 40 {
		t.Fatalf("stage 2 (files stay as detail): %+v", s1)
	}
	if s0 := s.ProgressStages[0]; *s0.SequencesEmbedded != 1 || s0.Percent != 100 || *s0.Seconds != 20 {
		t.Fatalf("stage 1: %+v", s0)
	}

	// Counts once read are kept: a polled status opens no file per stage,
	// so they are still given with the files gone.
	if err := os.Remove(filepath.Join(work, "stage-0", "counts.json")); err != nil {
		t.Fatal(err)
	}
	if s := get(); s.Overall.Sequences == nil || *s.Overall.Sequences != 20 || *s.ProgressStages[0].Sequences != 1 {
		t.Fatalf("counts after the files went: %+v", s.Overall)
	}

	// Predicting, with cached units.
	st.DB.Model(&store.JobStage{}).Where("job_id = ? AND stage_index = 1", id).Updates(map[string]any{"embedding_state": "done",
		"embedding_computed": 10, "predictions_made": 1, "predictions_cached": 1})
	if o := get().Overall; o.Phase != "predicting" || o.Percent != 87.5 ||
		!strings.Contains(o.Text, "predicting, 1 of 2 predictions made (1 from the prediction cache)") {
		t.Fatalf("predicting: %+v", o)
	}

	// The time left comes from the running phase's rate once its count was
	// seen to move: from 1 to 4 of 10 units in 2 s, so 6 to go take about
	// 4 s (the prediction is the job's last phase).
	st.DB.Model(&store.JobStage{}).Where("job_id = ? AND stage_index = 1", id).Updates(map[string]any{"predictions_total": 10, "predictions_made": 4})
	h.clock.Set(started.Add(62 * time.Second))
	if o := get().Overall; o.ETASeconds == nil || *o.ETASeconds != 4 || !strings.HasSuffix(o.Text, " · about 4 s left.") {
		t.Fatalf("predicting at a measured rate: %+v", o)
	}

	// Completed: 100 %, no time left, a summary line; the similarity note.
	done := started.Add(95 * time.Second)
	st.DB.Model(&store.JobStage{}).Where("job_id = ? AND stage_index = 1", id).Updates(map[string]any{"status": "completed", "completed_at": done})
	st.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"status": "Completed", "completed_at": done})
	writeFile(t, filepath.Join(h.cfg.MediaRoot, "jobs", id, "similarity.json"),
		`{"state":"not_configured","message":"Method B has no similarity dataset.","method":"B"}`)
	h.clock.Set(done.Add(time.Hour))
	s = get()
	if o := s.Overall; o.Phase != "completed" || o.Percent != 100 || o.ETASeconds == nil || *o.ETASeconds != 0 ||
		o.Text != "Completed in 1 min 45 s: 2 rows, 2 stages." {
		t.Fatalf("completed: %+v", o)
	}
	if *s.ProgressStages[1].Seconds != 75 {
		t.Fatalf("stage 2 ran %d s", *s.ProgressStages[1].Seconds)
	}
	sim := s.Similarity
	if sim == nil || sim.State != "not_configured" || sim.Unit != "% identity" ||
		sim.Message != "Similarity columns (% identity) are blank: Method B has no similarity dataset." ||
		strings.Join(sim.Columns, "|") != "mean similarity to B training data|max similarity to B training data" {
		t.Fatalf("similarity note %+v", sim)
	}

	// The JSON result carries the note per column.
	writeFile(t, filepath.Join(h.cfg.MediaRoot, "jobs", id, "output.csv"),
		"kcat (1/s),Source kcat,mean similarity to B training data,max similarity to B training data\n1.5,x,,\n")
	st.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"output_path": "jobs/" + id + "/output.csv"})
	r := h.do("GET", "/api/v1/result/"+id+"/?format=json", ip, key, nil)
	wantStatus(t, r, 200)
	var res struct {
		Columns     []string          `json:"columns"`
		ColumnNotes map[string]string `json:"columnNotes"`
	}
	if err := json.Unmarshal(r.Body.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.ColumnNotes) != 2 || res.ColumnNotes["max similarity to B training data"] != sim.Message {
		t.Fatalf("columnNotes %v", res.ColumnNotes)
	}
}

// BenchmarkStatusUserUnits measures GET /status/ of a job with two stages
// (SQLite) without kinflow's per-job files, and with the files its
// readable progress reads: each stage's counts.json and a 10,000-row
// similarity.json (the note decodes only its head, but reads it whole).
func BenchmarkStatusUserUnits(b *testing.B) {
	st := testenv.OpenStore(b, store.SQLite)
	// Unlimited status reads for the one key (the per-key read rate answers 429).
	h := newHarness(b, st, func(c *config.Config, _ *Deps) { c.StatusReadsPerSecond = 0 })
	const ip = "192.0.2.78"
	key := h.newKey(ip)
	id := h.submitted(ip, key)
	path := "/api/v1/status/" + id + "/"
	run := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r := h.do("GET", path, ip, key, nil); r.Code != 200 {
				b.Fatalf("status %d", r.Code)
			}
		}
	}
	b.Run("no-files", run)
	job := filepath.Join(h.cfg.MediaRoot, "jobs", id)
	var sim strings.Builder
	sim.WriteString(`{"state":"done","method":"B","dataset":"B","max":[`)
	for i := range 10000 {
		if i > 0 {
			sim.WriteByte(',')
		}
		sim.WriteString("87.65")
	}
	sim.WriteString(`],"mean":[` + strings.TrimSuffix(strings.Repeat("43.21,", 10000), ",") + `]}`)
	if err := os.MkdirAll(job, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(job, "similarity.json"), []byte(sim.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	for i := range 2 {
		p := filepath.Join(job, "work", "stage-"+string(rune('0'+i)), "counts.json")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(`{"rows":10000,"sequences":9000,"units":10000}`), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("counts-and-10k-similarity", run)
}

// TestStatusOfAnEndedJobReadsItsFilesOnce: an ended job's provenance and
// similarity note are read once per status snapshot (a polled status
// costs no file reads when nothing changed); a later write makes a
// new snapshot, which reads them again.
func TestStatusOfAnEndedJobReadsItsFilesOnce(t *testing.T) {
	st := testenv.OpenStore(t, store.SQLite)
	h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.StatusCacheTTL = time.Minute })
	const ip = "203.0.113.81"
	key := h.newKey(ip)
	id := h.submitted(ip, key)
	get := func() statusOverall { t.Helper(); return h.statusOverall(t, id, ip, key) }
	sim := filepath.Join(h.cfg.MediaRoot, "jobs", id, "similarity.json")
	writeFile(t, sim, `{"state":"not_configured","message":"Method B has no similarity dataset.","method":"B"}`)
	done := t0.Add(time.Minute)
	st.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"status": "Completed", "completed_at": done,
		"include_similarity_columns": true})
	time.Sleep(2 * statusRecheckDelay) // past a change notice's recheck window
	first := get()
	if first.Similarity == nil || first.Overall.Phase != "completed" {
		t.Fatalf("completed job's status: %+v", first)
	}
	if err := os.Remove(sim); err != nil {
		t.Fatal(err)
	}
	if again := get(); again.Similarity == nil || again.Similarity.Message != first.Similarity.Message {
		t.Fatalf("the ended job's similarity file was read again: %+v", again.Similarity)
	}
	// A write makes a new snapshot: the files are read again (gone now).
	st.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"completed_at": done.Add(time.Second)})
	time.Sleep(2 * statusRecheckDelay)
	if later := get(); later.Similarity != nil {
		t.Fatalf("a new snapshot kept the old note: %+v", later.Similarity)
	}
}
