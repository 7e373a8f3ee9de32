package methods

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/provenance"
)

// SyntheticEngineFingerprint is the fingerprint of the synthetic prediction
// engine for d: it says synthetic, and changes with d's model version.
func SyntheticEngineFingerprint(d *Descriptor) provenance.Fingerprint {
	return provenance.Fingerprint{Synthetic: true, Model: provenance.SyntheticModel,
		Program: "kinflow synthetic engine " + d.Key + " v" + d.ModelVersion, ProgramVersion: provenance.SyntheticVersion}
}

// EngineFingerprint is the fingerprint of d's command engine: the SHA-256
// of its program and model files (the script, every command token that
// names a file once the path placeholders are filled, the tools, model_dir
// and data_dir folders, and every file or folder in extra, such as method E's
// checkpoint root; interpreters are left out), remembered in hc by path,
// size and mtime, and the version of the chemistry toolkit (RDKit) the
// engine's interpreter imports. Its model is d's display name and model
// version.
func EngineFingerprint(d *Descriptor, hc *provenance.HashCache, extra ...string) (provenance.Fingerprint, error) {
	model := d.DisplayName + " v" + d.ModelVersion
	if d.Command == nil {
		return provenance.Fingerprint{Model: model, Program: "unconfigured"}, nil
	}
	c := d.Command
	pairs := []string{"{script}", c.Script}
	for _, k := range slices.Sorted(maps.Keys(c.Paths)) {
		pairs = append(pairs, "{"+k+"}", c.Paths[k])
	}
	rep := strings.NewReplacer(pairs...)
	program := c.Script
	if program == "" && len(c.Argv) > 0 {
		program = rep.Replace(c.Argv[0])
	}
	argv := []string{program}
	if c.Script != "" {
		argv = append(argv, c.Script)
	}
	for _, a := range c.Argv {
		if r := rep.Replace(a); !strings.Contains(r, "{") && r != program {
			argv = append(argv, r)
		}
	}
	// The method's helper code ({tools}: the reference's seqmap and
	// cache_io, which map sequences to ids and read the embeddings), the
	// model's weights and the method's data (methods A, G, G-O2 and I read
	// tables and checkpoints from {data_dir}): a file changed in place
	// changes the fingerprint, so the prediction cache misses.
	for _, k := range []string{"tools", "model_dir", "data_dir"} {
		if m := c.Paths[k]; m != "" && !slices.Contains(argv, m) {
			argv = append(argv, m)
		}
	}
	for _, e := range extra {
		if e != "" && !slices.Contains(argv, e) {
			argv = append(argv, e)
		}
	}
	fp, err := provenance.CommandFingerprint(hc, argv, model)
	if err != nil {
		return provenance.Fingerprint{}, err
	}
	fp.Program = d.Key + " command engine"
	fp.Call = callDigest(d)
	if c.Python != "" {
		fp.Libraries = map[string]string{"rdkit": RDKitVersion(c.Python)}
	}
	return fp, nil
}

// rdkitProbe prints the RDKit version the interpreter imports, or "absent".
// The package metadata is read first: importing RDKit takes a second.
const rdkitProbe = `import importlib.metadata as m
try:
    print(m.version("rdkit"))
except Exception:
    try:
        import rdkit
        print(rdkit.__version__)
    except Exception:
        print("absent")
`

// rdkitTimeout bounds the probe: an interpreter that hangs must not stall
// every prediction; its version then reads "unknown".
const rdkitTimeout = 60 * time.Second

// rdkitTTL is how long a probed version is trusted: an upgrade of RDKit
// changes no file of the interpreter itself, so the version is probed
// again at most this long after, not keyed on the interpreter's files.
const rdkitTTL = time.Minute

type rdkitProbed struct {
	version string
	at      time.Time
}

var rdkitVersions sync.Map // interpreter path → rdkitProbed

// RDKitVersion is the RDKit version python imports ("absent" without
// RDKit, "unknown" when the interpreter cannot be run), probed at most
// once per rdkitTTL per interpreter.
func RDKitVersion(python string) string {
	exe, err := exec.LookPath(python)
	if err != nil {
		return "unknown"
	}
	if v, ok := rdkitVersions.Load(exe); ok && time.Since(v.(rdkitProbed).at) < rdkitTTL {
		return v.(rdkitProbed).version
	}
	ctx, cancel := context.WithTimeout(context.Background(), rdkitTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, "-c", rdkitProbe).Output()
	v := strings.TrimSpace(string(out))
	if err != nil || v == "" {
		return "unknown"
	}
	rdkitVersions.Store(exe, rdkitProbed{version: v, at: time.Now()})
	return v
}

// callDigest is the SHA-256 of how kinflow calls d's program beyond the
// files the fingerprint hashes: its argument templates and flags, static
// arguments and typed params, environment, working directory, row keys,
// input behaviours, file contract, declared output forms and where its
// uncertainties are read. Each can
// change the numbers the program answers or how kinflow reads them, so a
// changed one makes the prediction cache miss without a model_version bump.
func callDigest(d *Descriptor) string {
	c := d.Command
	call := struct {
		Argv           []string                     `json:"argv"`
		InputFlag      string                       `json:"input_flag"`
		OutputFlag     string                       `json:"output_flag"`
		ExtraArgs      []string                     `json:"extra_args"`
		ExtraEnv       map[string]string            `json:"extra_env"`
		WorkDir        string                       `json:"workdir"`
		Env            []EnvVar                     `json:"env"`
		ColToKwarg     []ColumnKwarg                `json:"col_to_kwarg"`
		TargetKwargs   map[Target]map[string]string `json:"target_kwargs"`
		Params         map[Target]map[string]any    `json:"params"`
		InputBehaviors map[Target]string            `json:"input_behaviors"`
		FileContract   FileContract                 `json:"file_contract"`
		Outputs        map[Target]Output            `json:"outputs"`
		RowSeqID       bool                         `json:"row_seq_id"`
		Uncertainty    *UncertaintySource           `json:"uncertainty_from"`
	}{c.Argv, c.InputFlag, c.OutputFlag, c.ExtraArgs, c.ExtraEnv, c.WorkDir, d.EnvPaths, d.ColToKwarg,
		d.TargetKwargs, d.Params, d.InputBehaviors, d.FileContract.OrJSON(), d.Outputs, d.RowSeqID, d.UncertaintyFrom}
	// encoding/json sorts map keys, so equal calls give equal bytes.
	b, err := json.Marshal(call)
	if err != nil {
		// Params hold YAML-decoded values, which always encode; an
		// unencodable one still gives a distinct, stable digest.
		b = []byte(fmt.Sprintf("%#v", call))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
