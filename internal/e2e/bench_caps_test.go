package e2e

import (
	"bytes"
	"fmt"
	mrand "math/rand/v2"
	"mime/multipart"
	"os"
	"strings"
	"testing"
	"time"
)

// BenchmarkJobAtTheCaps runs, end to end on the synthetic backends (full
// stack, GPU road), one job at KINFLOW_MAX_UNITS_PER_JOB's default (100,000
// prediction units) for each contract that takes a row's lists: method E's
// kcat (native_multi: 10,000 rows of one candidate and 10 substrates, each
// read per candidate; and 1,000 rows of 10 candidates × 10 substrates),
// method D (native_full_reaction: 10,000 rows of 5 substrates + 5 products)
// and method B (expanded_pair: 10 substrates, one call each), and reports the
// job's time and the api's and worker's peak RSS: a job at the caps must stay
// within the stated memory. Run with -benchtime 1x; KINFLOW_BENCH_ROWS
// overrides the 10,000 rows.
func BenchmarkJobAtTheCaps(b *testing.B) {
	rows := 10000
	if v := os.Getenv("KINFLOW_BENCH_ROWS"); v != "" {
		fmt.Sscan(v, &rows)
	}
	for _, c := range []struct {
		name, method       string
		cands, subs, prods int
	}{
		{"E-native_multi", "E", 1, 10, 0}, {"D-native_full_reaction", "D", 1, 5, 5}, {"B-expanded_pair", "B", 1, 10, 0},
		// A tenth of the rows, each at the per-row cap's shape of many
		// candidates: 10 candidates × 10 substrates, the lists shared.
		{"E-native_multi-candidates", "E", 10, 10, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			csvText := capsFile(rows/c.cands, c.cands, 200, c.subs, c.prods)
			for i := 0; i < b.N; i++ {
				s := newStack(b, map[string]string{"GPU_EMBED_JOB_TIMEOUT_SECONDS": "7200", "KINFLOW_HEARTBEAT_TIMEOUT_SECONDS": "120"}, nil)
				var buf bytes.Buffer
				mw := multipart.NewWriter(&buf)
				fw, _ := mw.CreateFormFile("file", "in.csv")
				_, _ = fw.Write([]byte(csvText))
				_ = mw.Close()
				var rep struct {
					PredictionUnits struct {
						Total int `json:"total"`
					} `json:"predictionUnits"`
				}
				if code := s.do("POST", "/api/v1/validate/", &buf, mw.FormDataContentType(), &rep); code != 200 {
					b.Fatalf("validate: %d", code)
				}
				b.ReportMetric(float64(rep.PredictionUnits.Total), "units-validate")
				start := time.Now()
				id := s.submit(csvText, []string{"kcat"}, map[string]string{"kcat": c.method})
				if st := s.waitDone(id, 2*time.Hour); st.Status != "Completed" {
					b.Fatalf("job: %s", st.Error)
				}
				b.ReportMetric(time.Since(start).Seconds(), "job-s")
				for _, role := range []string{"api", "worker", "gpu-worker"} {
					if p, ok := s.procs[role]; ok {
						b.ReportMetric(peakRSSMB(b, p.Process.Pid), role+"-peak-MB")
					}
				}
				s.stop()
			}
		})
	}
}

// capsFile is rows rows of cands random seqLen-residue candidate sequences
// with subs substrates and, when prods > 0, a Products list of prods.
func capsFile(rows, cands, seqLen, subs, prods int) string {
	const aa = "ACDEFGHIKLMNPQRSTVWY"
	mols := []string{"CC(=O)O", "OC(=O)CCC(=O)O", "C1=CC=CC=C1O", "CCO", "OCC(O)CO", "O", "CC(=O)C(=O)O", "NCC(=O)O"}
	r := mrand.New(mrand.NewPCG(17, 19))
	list := func(n int) string {
		t := make([]string, n)
		for i := range t {
			t[i] = mols[r.IntN(len(mols))]
		}
		return strings.Join(t, ";")
	}
	var sb strings.Builder
	sb.WriteString("Protein Sequence,Substrates")
	if prods > 0 {
		sb.WriteString(",Products")
	}
	sb.WriteString("\n")
	for i := 0; i < rows; i++ {
		for k := range cands {
			if k > 0 {
				sb.WriteString(";")
			}
			seq := make([]byte, seqLen)
			for j := range seq {
				seq[j] = aa[r.IntN(len(aa))]
			}
			sb.Write(seq)
		}
		sb.WriteString("," + list(subs))
		if prods > 0 {
			sb.WriteString("," + list(prods))
		}
		sb.WriteString("\n")
	}
	return sb.String()
}
