package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// BenchmarkPredictionCache10k runs one 10,000-row kcat job of method B (10
// sequences × 1,000 substrates: 10,000 distinct prediction units on only
// 10 sequences' embeddings) twice on the full stack and reports both runs:
// submit → Completed, the Predict activity, and the cache lookup (the
// worker's "prediction cache" log line). KINFLOW_BENCH_ENGINE=command runs
// a stand-in B program (it appends the rows it got to rows.log) instead of
// the synthetic engine; KINFLOW_BENCH_DB=sqlite puts the application
// database on SQLite instead of Postgres.
func BenchmarkPredictionCache10k(b *testing.B) {
	env := map[string]string{"KINFLOW_HEARTBEAT_TIMEOUT_SECONDS": "120"}
	dir := b.TempDir()
	if os.Getenv("KINFLOW_BENCH_ENGINE") == "command" {
		script := filepath.Join(dir, "b.py")
		if err := os.WriteFile(script, []byte(engineBCounting), 0o644); err != nil {
			b.Fatal(err)
		}
		methods := filepath.Join(dir, "methods.yaml")
		if err := os.WriteFile(methods, []byte("methods:\n  - key: B\n    command: {python: /usr/bin/python3, script: "+script+"}\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		env["KINFLOW_PREDICTION_ENGINE"], env["KINFLOW_METHODS_FILE"] = "command", methods
	}
	if os.Getenv("KINFLOW_BENCH_DB") == "sqlite" {
		env["KINFLOW_DATABASE_URL"] = "sqlite:" + filepath.Join(dir, "kinflow.db")
	}
	s := newStack(b, env, nil)
	seqs := []string{"MKTAYIAKQRQISFVKSHFSRQ", "MSKGEELFTGVVPILVELDGDV", "MAHHHHHHVDDDDKMLEQ", "MTEYKLVVVGAGGVGKSALT",
		"MKVLAAGIVGLLLAAGCSS", "MGSSHHHHHHSSGLVPRGSH", "MDPKKLLLLAAALLAGCSSA", "MSTNPKPQRKTKRNTNRRPQ", "MQIFVKTLTGKTITLEVEPS", "MALWMRLLPLLALLALWGPD"}
	csv := cacheRows(seqs, chainSubstrates(0, 1000))
	lookup := regexp.MustCompile(`"msg":"prediction cache".*?"cached":(\d+).*?"lookup_ms":(\d+)`)
	for i := 0; i < b.N; i++ {
		var total, predict [2]time.Duration
		for run := range 2 {
			start := time.Now()
			id := s.submit(csv, []string{"kcat"}, map[string]string{"kcat": "B"})
			if st := s.waitDone(id, 30*time.Minute); st.Status != "Completed" {
				b.Fatalf("job %s: %s", id, st.Error)
			}
			total[run] = time.Since(start)
			phases, _, _ := s.phases("prediction:" + id)
			predict[run] = phases["Predict"]
		}
		logs, _ := os.ReadFile(s.logs["worker"])
		ms := lookup.FindAllSubmatch(logs, -1)
		if len(ms) < 2 {
			b.Fatalf("no prediction cache log lines in the worker's log")
		}
		missMs, _ := strconv.Atoi(string(ms[len(ms)-2][2]))
		hitMs, _ := strconv.Atoi(string(ms[len(ms)-1][2]))
		b.ReportMetric(total[0].Seconds(), "first-total-s")
		b.ReportMetric(total[1].Seconds(), "second-total-s")
		b.ReportMetric(predict[0].Seconds(), "first-Predict-s")
		b.ReportMetric(predict[1].Seconds(), "second-Predict-s")
		b.ReportMetric(float64(missMs), "first-lookup-ms")
		b.ReportMetric(float64(hitMs), "second-lookup-ms")
		if rows, err := os.ReadFile(filepath.Join(dir, "rows.log")); err == nil {
			b.Logf("program calls (rows per call): %q", rows)
		}
	}
}
