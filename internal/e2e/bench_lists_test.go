package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	mrand "math/rand/v2"
	"mime/multipart"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkSubstrateLists10k compares, end to end on the synthetic backends
// (full stack, GPU road), a 10,000-row file with three substrates per row
// (`Substrates`) and two candidate sequences in a tenth of the rows against
// the single-substrate file of the same rows (first substrate, first
// candidate), method B for kcat, Km and kcat/Km. Each variant gets a fresh
// stack and reports: /validate/ and submit time, the cold job (embeddings
// computed) and a warm rerun (everything cached) from submit to Completed,
// the warm job's PrepareInput/BuildPlan/Predict/Finalize, the embedding
// files the plan counted (one per distinct sequence), and the peak RSS of
// the api and worker processes. Run with -benchtime 1x
// (KINFLOW_BENCH_ROWS overrides the 10,000 rows).
func BenchmarkSubstrateLists10k(b *testing.B) {
	rows := 10000
	if v := os.Getenv("KINFLOW_BENCH_ROWS"); v != "" {
		fmt.Sscan(v, &rows)
	}
	single, lists := substrateListFiles(rows, 300)
	for _, v := range []struct{ name, csv string }{{"single", single}, {"lists", lists}} {
		b.Run(v.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchListsVariant(b, v.csv)
			}
		})
	}
}

func benchListsVariant(b *testing.B, csvText string) {
	s := newStack(b, map[string]string{"GPU_EMBED_JOB_TIMEOUT_SECONDS": "7200", "KINFLOW_HEARTBEAT_TIMEOUT_SECONDS": "120"}, nil)
	defer s.stop()
	targets := []string{"kcat", "Km", "kcat/Km"}
	sel := map[string]string{"kcat": "B", "Km": "B", "kcat/Km": "B"}

	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "in.csv")
	_, _ = fw.Write([]byte(csvText))
	_ = mw.Close()
	start := time.Now()
	var rep string
	if code := s.do("POST", "/api/v1/validate/", &buf, mw.FormDataContentType(), &rep); code != 200 {
		b.Fatalf("validate: %d %s", code, rep)
	}
	b.ReportMetric(time.Since(start).Seconds(), "validate-s")

	run := func(label string) string {
		start := time.Now()
		id := s.submit(csvText, targets, sel)
		if label == "cold" {
			b.ReportMetric(time.Since(start).Seconds(), "submit-s")
		}
		if st := s.waitDone(id, 2*time.Hour); st.Status != "Completed" {
			b.Fatalf("%s job: %s", label, st.Error)
		}
		b.ReportMetric(time.Since(start).Seconds(), label+"-total-s")
		return id
	}
	cold := run("cold")
	st := s.status(cold)
	if len(st.Stages) > 0 {
		b.ReportMetric(float64(st.Stages[0].Embedding.Total), "embedding-files")
	}
	warm := run("warm")
	phases, _, _ := s.phases("prediction:" + warm)
	for _, name := range []string{"PrepareInput", "BuildPlan", "Predict", "Finalize"} {
		b.ReportMetric(phases[name].Seconds(), "warm-"+name+"-s")
	}
	b.ReportMetric(float64(len(s.resultCSV(warm)))/1e6, "result-MB")
	for _, role := range []string{"api", "worker"} {
		b.ReportMetric(peakRSSMB(b, s.procs[role].Process.Pid), role+"-peak-MB")
	}
}

// substrateListFiles builds the two inputs: rows with random sequences of
// seqLen residues; the list file has three substrates per row and, in every
// tenth row, a second candidate sequence.
func substrateListFiles(rows, seqLen int) (single, lists string) {
	const aa = "ACDEFGHIKLMNPQRSTVWY"
	subs := []string{"CC(=O)O", "OC(=O)CCC(=O)O", "C1=CC=CC=C1O", "CCO", "OCC(O)CO", "O", "CC(=O)C(=O)O", "NCC(=O)O"}
	r := mrand.New(mrand.NewPCG(11, 13))
	seq := func() string {
		b := make([]byte, seqLen)
		for i := range b {
			b[i] = aa[r.IntN(len(aa))]
		}
		return string(b)
	}
	var sb, lb strings.Builder
	sb.WriteString("Protein Sequence,Substrate\n")
	lb.WriteString("Protein Sequence,Substrates\n")
	for i := 0; i < rows; i++ {
		first := seq()
		cands := first
		if i%10 == 0 {
			cands += ";" + seq()
		}
		a, b2, c := subs[r.IntN(len(subs))], subs[r.IntN(len(subs))], subs[r.IntN(len(subs))]
		fmt.Fprintf(&sb, "%s,%s\n", first, a)
		fmt.Fprintf(&lb, "%s,%s;%s;%s\n", cands, a, b2, c)
	}
	return sb.String(), lb.String()
}

// peakRSSMB is a process's peak resident set (VmHWM) in MB.
func peakRSSMB(b *testing.B, pid int) float64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}
