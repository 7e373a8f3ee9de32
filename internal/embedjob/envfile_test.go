package embedjob

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/stepserver"
)

func TestParseEnvFile(t *testing.T) {
	src := `# GPU host
export GPU_EMBED_TOKS_PER_BATCH=2048   # tokens
GPU_NAME="NVIDIA \"H200\" \$x"
METHODA_T5_MODEL_PATH='/models/prot t5 # not a comment'
EMPTY=
GPU_EMBED_STEP_CMD_METHODD_ESM1B=python3 /opt/esm1b.py --manifest {manifest_file}

SPACED = value with spaces
`
	m, err := ParseEnvFile([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"GPU_EMBED_TOKS_PER_BATCH":         "2048",
		"GPU_NAME":                         `NVIDIA "H200" $x`,
		"METHODA_T5_MODEL_PATH":            "/models/prot t5 # not a comment",
		"EMPTY":                            "",
		"GPU_EMBED_STEP_CMD_METHODD_ESM1B": "python3 /opt/esm1b.py --manifest {manifest_file}",
		"SPACED":                           "value with spaces",
	}
	if len(m) != len(want) {
		t.Fatalf("got %v", m)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %q, want %q", k, m[k], v)
		}
	}
	for _, bad := range []string{"NOEQUALS", "1BAD=x", "A='open", `A="open`, `A="x" trailing`, "BAD-KEY=1"} {
		if _, err := ParseEnvFile([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestSplitCommand(t *testing.T) {
	cases := map[string][]string{
		`python3 run.py --ids {seq_ids}`:        {"python3", "run.py", "--ids", "{seq_ids}"},
		`a 'b c' "d \"e\" \$f" g\ h`:            {"a", "b c", `d "e" $f`, "g h"},
		`  lead   trail  `:                      {"lead", "trail"},
		`x"y"'z'`:                               {"xyz"},
		`""`:                                    {""},
		`a "back\slash"`:                        {"a", `back\slash`},
		"cmd --file={seq_id_to_seq_file} $HOME": {"cmd", "--file={seq_id_to_seq_file}", "$HOME"},
	}
	for in, want := range cases {
		got, err := SplitCommand(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("SplitCommand(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{`a 'b`, `a "b`, `a\`} {
		if _, err := SplitCommand(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzSplitCommand(f *testing.F) {
	for _, s := range []string{`a 'b c' "d"`, `x\ y`, `"\$"`, "", `'`, `a"b'c"d'`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := SplitCommand(s)
		if err != nil {
			return
		}
		// Re-quoting every word and splitting again gives the same words.
		var b strings.Builder
		for i, w := range words {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString("'" + strings.ReplaceAll(w, "'", `'\''`) + "'")
		}
		again, err := SplitCommand(b.String())
		if err != nil || !slices.Equal(again, words) {
			t.Fatalf("round trip of %q: %q → %q (%v)", s, words, again, err)
		}
	})
}

func FuzzParseEnvFile(f *testing.F) {
	f.Add("A=1\n# c\nexport B='x y'\nC=\"q\\\"\"\n")
	f.Add("=\n")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseEnvFile([]byte(s))
		if err != nil {
			return
		}
		for k := range m {
			if !validEnvKey(k) {
				t.Fatalf("invalid key %q accepted", k)
			}
		}
	})
}

func TestLoadSettings(t *testing.T) {
	file := map[string]string{
		"GPU_EMBED_STEP_CMD_METHODF_ESM1V":      `python3 esm1v.py --manifest {manifest_file} --name 'a b'`,
		"GPU_EMBED_TOKS_PER_BATCH":              "2000",
		"GPU_EMBED_TOKS_PER_BATCH_METHODG_ESM2": "6000",
		"GPU_EMBED_MAX_RESIDUES_METHODG_ESM2":   "1022",
		"GPU_EMBED_MAX_RESIDUES_METHODF_ESM1V":  "0",
		"METHODE_CHECKPOINT_ROOT":               "/ckpt",
		"KINFLOW_TEST_ONLY_IN_FILE":             "from-file",
		"GPU_EMBED_SERVICE_TOKEN":               "file-secret",
	}
	t.Setenv("KINFLOW_DATABASE_URL", "postgres://kinflow:env-secret@db/kinflow")
	s, err := LoadSettings(LayeredLookup(file), file, "/media")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Commands["methodf_esm1v"]; !slices.Equal(got, []string{"python3", "esm1v.py", "--manifest", "{manifest_file}", "--name", "a b"}) {
		t.Errorf("command %q", got)
	}
	if s.TokenBudget("methodg_esm2") != 6000 || s.TokenBudget("prot_t5_mean") != 2000 {
		t.Errorf("budgets %d %d", s.TokenBudget("methodg_esm2"), s.TokenBudget("prot_t5_mean"))
	}
	if s.MaxResidues["methodg_esm2"] != 1022 || s.MaxResidues["methodf_esm1v"] != 0 || s.MaxResidues["methodd_esm1b"] != 0 {
		t.Errorf("max residues %v", s.MaxResidues)
	}
	if s.JobLogDir != filepath.Join("/media", "gpu_jobs", "logs") || s.MethodECheckpointRoot != "/ckpt" {
		t.Errorf("log dir %q, ckpt %q", s.JobLogDir, s.MethodECheckpointRoot)
	}
	if !slices.Contains(s.ProgramEnv, "KINFLOW_TEST_ONLY_IN_FILE=from-file") {
		t.Error("env file entries must reach step programs")
	}
	for _, kv := range s.ProgramEnv {
		if strings.Contains(kv, "secret") {
			t.Errorf("step programs would get %q", kv)
		}
	}

	for name, bad := range map[string]map[string]string{
		"unknown step":    {"GPU_EMBED_STEP_CMD_NOPE": "x"},
		"deprecated step": {"GPU_EMBED_STEP_CMD_METHODA_BINDSITES": "x"},
		"bad quote":       {"GPU_EMBED_STEP_CMD_PROT_T5_MEAN": "x 'y"},
		"bad budget":      {"GPU_EMBED_TOKS_PER_BATCH": "lots"},
		"bad step budget": {"GPU_EMBED_TOKS_PER_BATCH_PROT_T5_MEAN": "0"},
	} {
		if _, err := LoadSettings(LayeredLookup(bad), bad, "/m"); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	t.Setenv("GPU_EMBED_TOKS_PER_BATCH", "999")
	s, _ = LoadSettings(LayeredLookup(file), file, "/media")
	if s.ToksPerBatch != 999 {
		t.Errorf("the process environment must win: %d", s.ToksPerBatch)
	}
}

// TestLoadSettingsDefaults: the defaults of config.HostKeys are the
// constants of the code that uses them.
func TestLoadSettingsDefaults(t *testing.T) {
	s, err := LoadSettings(func(string) (string, bool) { return "", false }, nil, "/media")
	if err != nil {
		t.Fatal(err)
	}
	if s.ToksPerBatch != DefaultToksPerBatch || s.MaxBatchSeqs != 0 || s.ErrorLogTailLines != 120 || s.SyntheticDelay != 0 {
		t.Errorf("batch defaults %+v", s)
	}
	want := stepserver.Options{Max: stepserver.DefaultMax, Idle: stepserver.DefaultIdle, StartTimeout: stepserver.DefaultStartTimeout, KillGrace: stepserver.DefaultKillGrace, Ahead: stepserver.DefaultAhead}
	if s.Pool != want {
		t.Errorf("pool %+v, want %+v", s.Pool, want)
	}
	if s.ScratchDir != filepath.Join(os.TempDir(), "kinflow-gpu-embed", "scratch") {
		t.Errorf("scratch %q", s.ScratchDir)
	}
	file := map[string]string{stepserver.EnvStartSeconds: "0"}
	var ke *config.KeyError
	if _, err := LoadSettings(LayeredLookup(file), file, "/m"); !errors.As(err, &ke) || ke.Key != stepserver.EnvStartSeconds {
		t.Errorf("bad %s: %v, want a *config.KeyError naming it", stepserver.EnvStartSeconds, err)
	}
	for _, v := range []string{"0", "17", "two"} {
		file := map[string]string{stepserver.EnvAhead: v}
		if _, err := LoadSettings(LayeredLookup(file), file, "/m"); !errors.As(err, &ke) || ke.Key != stepserver.EnvAhead {
			t.Errorf("%s=%s: %v, want a *config.KeyError naming it", stepserver.EnvAhead, v, err)
		}
	}
	file = map[string]string{stepserver.EnvAhead: "1"}
	if s, err := LoadSettings(LayeredLookup(file), file, "/m"); err != nil || s.Pool.Ahead != 1 {
		t.Errorf("%s=1: %+v %v", stepserver.EnvAhead, s.Pool, err)
	}
}

func TestLoadEnvFileFromDisk(t *testing.T) {
	p := filepath.Join(t.TempDir(), "gpu.env")
	if err := os.WriteFile(p, []byte("GPU_NAME=test-gpu\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := LoadEnvFile(p)
	if err != nil || m["GPU_NAME"] != "test-gpu" {
		t.Fatalf("%v %v", m, err)
	}
	if _, err := LoadEnvFile(p + ".missing"); err == nil {
		t.Fatal("missing file accepted")
	}
}
