package methods

import (
	"sort"
	"strings"

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
// names a file once the path placeholders are filled, and the model_dir
// folder; interpreters are left out), remembered in hc by path, size and
// mtime. Its model is d's display name and model version.
func EngineFingerprint(d *Descriptor, hc *provenance.HashCache) (provenance.Fingerprint, error) {
	model := d.DisplayName + " v" + d.ModelVersion
	if d.Command == nil {
		return provenance.Fingerprint{Model: model, Program: "unconfigured"}, nil
	}
	c := d.Command
	pairs := []string{"{script}", c.Script}
	keys := make([]string, 0, len(c.Paths))
	for k := range c.Paths {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
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
	if m := c.Paths["model_dir"]; m != "" {
		argv = append(argv, m)
	}
	fp, err := provenance.CommandFingerprint(hc, argv, model)
	if err != nil {
		return provenance.Fingerprint{}, err
	}
	fp.Program = d.Key + " command engine"
	return fp, nil
}
