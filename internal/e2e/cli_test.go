package e2e

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/testenv"
)

// cliRun is one run of a `kinflow` client subcommand.
type cliRun struct {
	stdout, stderr string
	code           int
}

// cli runs the real kinflow binary with KINFLOW_URL pointing at the stack
// and env on top (KINFLOW_API_KEY unset unless given).
func (s *stack) cli(env map[string]string, args ...string) cliRun {
	s.t.Helper()
	cmd := exec.Command(kinflowBin, args...)
	cmd.Dir = s.t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KINFLOW_URL=") && !strings.HasPrefix(kv, "KINFLOW_API_KEY=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "KINFLOW_URL="+s.base)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		s.t.Fatalf("run kinflow %v: %v", args, err)
	}
	return cliRun{out.String(), errb.String(), code}
}

// want checks an exit code and that stdout/stderr contain the given texts
// ("out:" or "err:" prefixed).
func (r cliRun) want(t *testing.T, what string, code int, contains ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
	for _, c := range contains {
		where, text, _ := strings.Cut(c, ":")
		got := r.stdout
		if where == "err" {
			got = r.stderr
		}
		if !strings.Contains(got, text) {
			t.Fatalf("%s: %s lacks %q\nstdout: %s\nstderr: %s", what, where, text, r.stdout, r.stderr)
		}
	}
}

// TestCLIAgainstStack runs every client subcommand of the real binary
// against a running stack (api, worker, gpu-worker processes), with their
// errors: usage (exit 2), API errors with the API's text (exit 1), a
// missing file, an unknown job, a bad key, a result before completion.
func TestCLIAgainstStack(t *testing.T) {
	slow := envFile(t, "GPU_EMBED_SYNTHETIC_DELAY_MS=400")
	s := newStack(t, nil, map[string]map[string]string{"gpu-worker": {"KINFLOW_GPU_ENV_FILE": slow}})
	example := filepath.Join(testenv.RepoRoot(), "docs", "example.csv")
	suffix := s.key[len(s.key)-6:]

	// key: the stack already holds this address's key.
	s.cli(nil, "key", "status").want(t, "key status", 0, "out:active key …"+suffix)
	s.cli(nil, "key", "generate").want(t, "key generate with a key", 1, "err:An active API key already exists", "err:(HTTP 409)")
	s.cli(nil, "key", "revoke").want(t, "key revoke", 0, "out:revoked")
	s.cli(nil, "key", "status").want(t, "key status after revoke", 0, "out:no active key for this address")
	s.cli(nil, "key", "revoke").want(t, "key revoke twice", 1, "err:No active API key for this address. (HTTP 404)")
	s.cli(nil, "key").want(t, "key without action", 2, "err:want one of: status, generate, revoke")
	s.cli(nil, "key", "rotate").want(t, "key rotate", 2, `err:unknown key action "rotate"`)
	gen := s.cli(nil, "key", "generate")
	gen.want(t, "key generate", 0, "err:shown only once")
	key := strings.TrimSpace(gen.stdout)
	if !strings.HasPrefix(key, "ak_") || len(key) != 67 {
		t.Fatalf("generated key %q: stdout must hold the key alone", gen.stdout)
	}
	s.key = key
	withKey := map[string]string{"KINFLOW_API_KEY": key}
	badKey := map[string]string{"KINFLOW_API_KEY": "ak_" + strings.Repeat("0", 64)}

	s.cli(nil, "methods").want(t, "methods", 0, "out:kcat:", "out:Km:", "out:kcat/Km:", "out:  B ",
		"out:gives uncertainty (standard deviation of log10 of the value: total, aleatoric, epistemic)", "out:±: the method gives an uncertainty")

	// validate
	s.cli(withKey, "validate", example).want(t, "validate example", 0, "out:3 rows", "out:no row problems")
	bad := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(bad, []byte("Protein Sequence,Substrate\nMKTAYIAKQ,CCO\nMK1TZ,CCO\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.cli(withKey, "validate", bad).want(t, "validate bad rows", 1, "out:Row 2, Protein Sequence: 2 characters are not amino acids: '1' at position 3, 'Z' at position 5.", "err:1 row problem(s) in bad.csv")
	// Only the chosen method's limit is reported, not every method's.
	long := filepath.Join(t.TempDir(), "long.csv")
	if err := os.WriteFile(long, []byte("Protein Sequence,Substrate\n"+strings.Repeat("A", 1200)+",CCO\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	chosen := s.cli(withKey, "validate", "--methods", "kcat=B", long)
	chosen.want(t, "validate chosen method", 0, "out:Method B: 1 sequence is longer than its limit of 1000 residues")
	if strings.Contains(chosen.stdout, "Method C") {
		t.Errorf("validate --methods kcat=B reports another method:\n%s", chosen.stdout)
	}
	lists := filepath.Join(t.TempDir(), "lists.csv")
	if err := os.WriteFile(lists, []byte("Protein Sequence,Substrates\nMKTAYIAKQ;MK1T,CCO;X((\nMKTAYIAKQ,\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.cli(withKey, "validate", lists).want(t, "validate substrate lists", 1,
		"out:Row 1, Protein Sequence (candidate 2): 1 character is not an amino acid: '1' at position 3.",
		`out:Row 1, Substrates: substrate 2 "X((" is not a valid SMILES or InChI.`,
		"out:Row 2, Substrates: the substrate list is empty.")
	s.cli(nil, "methods").want(t, "methods input behaviour", 0, "out:Substrates lists: native_multi", "out:Substrates lists: expanded_pair", "out:  G-O2 ")
	js := s.cli(withKey, "validate", "--json", example)
	js.want(t, "validate --json", 0)
	var rep map[string]any
	if err := json.Unmarshal([]byte(js.stdout), &rep); err != nil || rep["rowCount"] != float64(3) {
		t.Fatalf("validate --json: %v %s", err, js.stdout)
	}
	s.cli(withKey, "validate", filepath.Join(t.TempDir(), "missing.csv")).want(t, "validate missing file", 1, "err:read input:", "err:no such file or directory")
	s.cli(badKey, "validate", example).want(t, "validate bad key", 1, "err:Invalid or revoked API key. (HTTP 401)")
	s.cli(nil, "validate", example).want(t, "validate without key", 1, "err:no API key: pass --key or set KINFLOW_API_KEY")
	s.cli(withKey, "validate").want(t, "validate without file", 2, "err:want exactly one FILE")
	s.cli(nil, "validate", "--url", "http://127.0.0.1:1", "--key", key, example).want(t, "validate unreachable", 1, "err:cannot reach kinflow at http://127.0.0.1:1")

	// submit: usage errors first.
	s.cli(withKey, "submit", example).want(t, "submit without target", 2, "err:choose what to predict")
	s.cli(withKey, "submit", example, "--target", "kcat").want(t, "submit unpaired", 2, "err:1 --target but 0 --method")
	s.cli(withKey, "submit", example, "--methods", "kcat").want(t, "submit bad --methods", 2, "err:want target=method pairs")
	s.cli(withKey, "submit", example, "--methods", "kcat=B", "--long", "cut").want(t, "submit bad --long", 2, `err:--long "cut"`)
	s.cli(withKey, "submit", example, "--methods", "kcat=B", "-o", "x.csv").want(t, "submit -o without --wait", 2, "err:-o needs --wait")
	s.cli(withKey, "submit", example, "--methods", "kcat=Z").want(t, "submit unknown method", 1, "err:(HTTP 400)", "err:Z")
	s.cli(badKey, "submit", example, "--methods", "kcat=B").want(t, "submit bad key", 1, "err:Invalid or revoked API key.")

	// A job without --wait: its id on stdout; its result is a 409 until
	// it completes (the GPU host is slowed down).
	sub := s.cli(withKey, "submit", example, "--target", "kcat", "--method", "B")
	sub.want(t, "submit", 0)
	job1 := strings.TrimSpace(sub.stdout)
	if len(job1) != 22 {
		t.Fatalf("job id %q", sub.stdout)
	}
	s.cli(withKey, "result", job1).want(t, "result before completion", 1, "err:is not completed", "err:(HTTP 409)")
	s.cli(withKey, "status", job1).want(t, "status", 0, "out:job "+job1+":", "out:stage 1 kcat·B")

	// --wait: a progress bar on stderr (one line per change off a terminal)
	// and the result written to -o.
	outFile := filepath.Join(t.TempDir(), "res.csv")
	w := s.cli(withKey, "submit", example, "--methods", "kcat=B,Km=C", "--wait", "-o", outFile)
	w.want(t, "submit --wait", 0, "err:wrote 3 rows to "+outFile+" (", "err:%  elapsed 0:0", "err:  ETA ", "err:3 rows  stage 1/2 kcat·B", "err:note: this result comes from kinflow's synthetic backend",
		"err:note: Similarity columns (% identity) are blank: The similarity dataset B of method B is not installed on this server.")
	job2 := strings.TrimSpace(w.stdout)
	var bars []string
	for _, l := range strings.Split(w.stderr, "\n") {
		if strings.Contains(l, "[") && strings.Contains(l, "]") {
			bars = append(bars, l)
		}
	}
	if len(bars) < 2 || !strings.HasPrefix(bars[len(bars)-1], "Completed") || !strings.Contains(bars[len(bars)-1], "[########################] 100.0%") {
		t.Fatalf("progress lines %q", bars)
	}
	data, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil || len(recs) != 4 || !strings.Contains(string(data), "Synthetic placeholder") {
		t.Fatalf("-o result: %v %q", err, data)
	}

	// The first job has finished by now (the second ran after it).
	st := s.waitDone(job1, 60*time.Second)
	if st.Status != "Completed" {
		t.Fatalf("job1 %s %s", st.Status, st.Error)
	}
	sj := s.cli(withKey, "status", "--json", job2)
	sj.want(t, "status --json", 0)
	var stj map[string]any
	if err := json.Unmarshal([]byte(sj.stdout), &stj); err != nil || stj["status"] != "Completed" || stj["jobId"] != job2 {
		t.Fatalf("status --json: %v %s", err, sj.stdout)
	}
	s.cli(withKey, "status", job2).want(t, "status completed", 0, "out:Completed", "out:stage 2 Km·C", "out:Completed in ",
		"out:stage 1 kcat·B: completed; 3 rows, 3 sequences, 3 embedded;", "out:similarity: Similarity columns (% identity) are blank")
	r := s.cli(withKey, "result", job1)
	r.want(t, "result CSV", 0, "out:Synthetic placeholder", "err:synthetic backend")
	if r.stdout != s.resultCSV(job1) {
		t.Fatalf("result CSV differs from the API's")
	}
	rj := s.cli(withKey, "result", "--json", job1)
	rj.want(t, "result --json", 0)
	var res struct {
		RowCount int `json:"rowCount"`
	}
	if err := json.Unmarshal([]byte(rj.stdout), &res); err != nil || res.RowCount != 3 {
		t.Fatalf("result --json: %v %s", err, rj.stdout)
	}
	jf := filepath.Join(t.TempDir(), "res.json")
	s.cli(withKey, "result", job1, "--json", "-o", jf).want(t, "result --json -o", 0, "err:wrote 3 rows to "+jf+" (")
	if b, err := os.ReadFile(jf); err != nil || !json.Valid(b) {
		t.Fatalf("result -o json: %v %q", err, b)
	}

	// kinflow jobs: both jobs, newest first; --status filters; --json.
	s.cli(withKey, "jobs").want(t, "jobs", 0, "out:JOB", "out:"+job2+"  Completed  kcat=B,Km=C  3", "out:"+job1)
	lj := s.cli(withKey, "jobs", "--json", "--all", "--limit", "1", "--status", "Completed")
	lj.want(t, "jobs --json", 0)
	var listed []map[string]any
	if err := json.Unmarshal([]byte(lj.stdout), &listed); err != nil || len(listed) != 2 || listed[0]["jobId"] != job2 || listed[1]["jobId"] != job1 {
		t.Fatalf("jobs --json --all: %v %s", err, lj.stdout)
	}
	s.cli(withKey, "jobs", "--status", "Failed").want(t, "jobs none failed", 0)
	s.cli(withKey, "jobs", "--status", "Done").want(t, "jobs bad status", 1, "err:Invalid status 'Done'", "err:(HTTP 400)")
	s.cli(withKey, "jobs", "extra").want(t, "jobs extra", 2, "err:jobs takes no arguments")
	// --idempotency-key: a rerun gets the same job, not a second one.
	k1 := s.cli(withKey, "submit", example, "--methods", "kcat=B", "--idempotency-key", "cli-run-1")
	k1.want(t, "submit with key", 0)
	s.cli(withKey, "submit", example, "--methods", "kcat=B", "--idempotency-key", "cli-run-1").want(t, "submit same key", 0, "out:"+strings.TrimSpace(k1.stdout))
	// The example's kcat rows by B were predicted by job1: served from the
	// prediction cache, and status says so; --no-prediction-cache predicts
	// them afresh.
	k1id := strings.TrimSpace(k1.stdout)
	if st := s.waitDone(k1id, 60*time.Second); st.Status != "Completed" {
		t.Fatalf("cached job %s", st.Status)
	}
	s.cli(withKey, "status", k1id).want(t, "status cached", 0, "out:predictions 3/3 (3 from the prediction cache)",
		"out:charged 3 rows, refunded 3 (3 from the prediction cache): 0 rows from the daily quota")
	nc := s.cli(withKey, "submit", example, "--methods", "kcat=B", "--no-prediction-cache", "--wait")
	nc.want(t, "submit --no-prediction-cache", 0)
	if out := s.cli(withKey, "status", strings.TrimSpace(nc.stdout)); strings.Contains(out.stdout, "prediction cache") {
		t.Fatalf("--no-prediction-cache job used the cache: %s", out.stdout)
	}
	s.cli(withKey, "submit", example, "--methods", "kcat=C", "--idempotency-key", "cli-run-1").want(t, "submit same key other request", 1, "err:(HTTP 422)")

	// Unknown jobs and bad keys.
	s.cli(withKey, "status", "NoSuchJob").want(t, "status unknown", 1, "err:No job found with id 'NoSuchJob'. (HTTP 404)")
	s.cli(withKey, "result", "NoSuchJob").want(t, "result unknown", 1, "err:(HTTP 404)")
	s.cli(badKey, "status", job1).want(t, "status bad key", 1, "err:(HTTP 401)")
	s.cli(badKey, "result", job1).want(t, "result bad key", 1, "err:(HTTP 401)")
	s.cli(withKey, "status").want(t, "status without job", 2, "err:want exactly one JOB id")
	s.cli(withKey, "result", "a", "b").want(t, "result two jobs", 2, "err:want exactly one JOB id")
	s.cli(withKey, "status", "--bogus", job1).want(t, "status bad flag", 2, "err:flag provided but not defined")

	// Revoking the key ends its access, with the API's text.
	s.cli(nil, "key", "revoke").want(t, "final revoke", 0, "out:revoked")
	s.cli(withKey, "status", job1).want(t, "status revoked key", 1, "err:Invalid or revoked API key. (HTTP 401)")
}
