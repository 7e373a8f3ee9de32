// Package methods is kinflow's method catalogue (README.md, "Adding a method"): one Descriptor per prediction method, the planner
// profile and GPU step keys each uses, and the step keys of the GPU runner
// including the two deprecated ones and what replaces them.
//
// The built-in catalogue (Default) uses neutral labels as method ids
// (`A-H`, `A-L`, `B` … `J`). An operator file (Load) can rename, add or remove
// methods and set each one's command without code changes.
package methods

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Target is a predicted kinetic parameter.
type Target string

// The three targets, spelled exactly as on the wire.
const (
	Kcat   Target = "kcat"
	Km     Target = "Km"
	KcatKm Target = "kcat/Km"
)

// Targets returns the targets in canonical order: kcat, Km, kcat/Km.
func Targets() []Target { return []Target{Kcat, Km, KcatKm} }

// ParseTarget maps a wire spelling to a Target; false when it is not one.
func ParseTarget(s string) (Target, bool) {
	for _, t := range Targets() {
		if string(t) == s {
			return t, true
		}
	}
	return "", false
}

// EngineKind says how a method's predictions run (the reference's dedicated
// engine or generic subprocess; method F's configured batch script is a third kind).
type EngineKind string

// Engine kinds.
const (
	// EngineDedicated is a method-specific engine with its own file contract
	// (README.md, "Adding a method"): A-H, A-L, C, D.
	EngineDedicated EngineKind = "dedicated"
	// EngineGeneric is the generic subprocess engine with the JSON file
	// contract: B, E, G, H, I, J.
	EngineGeneric EngineKind = "generic"
	// EngineBatchScript is a configured batch prediction script: F.
	EngineBatchScript EngineKind = "batch_script"
)

func (k EngineKind) valid() bool {
	return k == EngineDedicated || k == EngineGeneric || k == EngineBatchScript
}

// Citation is how to cite d: "Authors. Title. URL. Code: repository.",
// with what the descriptor states; empty when it states no publication or
// only the built-in labels' placeholders (example.org addresses).
func (d *Descriptor) Citation() string {
	placeholder := func(u string) bool { return strings.Contains(u, "example.org") }
	if d.PublicationTitle == "" || placeholder(d.CitationURL) {
		return ""
	}
	var parts []string
	for _, p := range []string{d.Authors, d.PublicationTitle, d.CitationURL} {
		if p = strings.TrimSpace(p); p != "" {
			parts = append(parts, strings.TrimSuffix(p, "."))
		}
	}
	out := strings.Join(parts, ". ") + "."
	if d.RepoURL != "" && !placeholder(d.RepoURL) {
		out += " Code: " + d.RepoURL + "."
	}
	return out
}

// FileContract names the files a method's prediction process reads and
// writes under the command engine, and its default command line.
type FileContract string

// File contracts (README.md, "Adding a method").
const (
	// ContractJSON is the generic engine's JSON in and out:
	// `{python} {script} <extra_args…> --input {input} --output {output}`.
	// The default, and the built-in contract of B, E, G, H, I and J.
	ContractJSON FileContract = "json"
	// ContractSubstrateCSV is methods C and F: `input_<id>.csv` with the
	// columns `Substrate SMILES`, `Protein Sequence`; command
	// `{python} {script} <extra_args…> {input} {output} {kinetics_type}`;
	// output column `Predicted Value`, one row per input row.
	ContractSubstrateCSV FileContract = "substrate_csv"
	// ContractReactionCSV is method D: `input_<id>.csv` with the columns
	// `Substrates`, `Products`, `Protein Sequence`; command
	// `{python} {script} <extra_args…> {input} {output}`; output column
	// `kcat [s^(-1)]`.
	ContractReactionCSV FileContract = "reaction_csv"
	// ContractMethodA is methods A-H and A-L: `input_<id>.csv` holding a
	// JSON list of {"smiles", "sequence", "Sequence"}; command
	// `{python} {script} <extra_args…> --mode predict --task {task}
	// --model_config {model_config} --save_results {output} --data_path
	// {input}`; output column `y_pred`, rows matched by (sequence, smiles)
	// when the output has those columns, else by position. {model_config}
	// is the target kwarg `model_config` when set (the reference profile:
	// KinForm-H, KinForm-L), else `A-<model_variant>`, else the key.
	ContractMethodA FileContract = "methoda"
	// ContractSubstrateTSV is method L (the reference's DLKcat):
	// `input_<id>.tsv` with the header `Substrate Name`, `Substrate
	// SMILES`, `Protein Sequence` (the name is always `noname`); command
	// `{python} {script} <extra_args…> {input} {output}`; output
	// `output_<id>.tsv`, a header line and then one line per input row
	// whose fourth tab-separated field is the value. A row whose sequence
	// holds a letter outside the twenty standard amino acids, or whose
	// substrate has several disconnected fragments, is not sent (the
	// program reads neither) and gets that reason. Substrates go in the
	// SMILES form of the other dedicated contracts (RDKit canonical when
	// the job asks for canonical substrates); the reference's engine
	// writes its canonical SMILES with explicit hydrogens instead.
	ContractSubstrateTSV FileContract = "substrate_tsv"
)

// FileContracts lists the contracts in documentation order.
func FileContracts() []FileContract {
	return []FileContract{ContractJSON, ContractSubstrateCSV, ContractReactionCSV, ContractMethodA, ContractSubstrateTSV}
}

// OrJSON returns c, or ContractJSON when c is empty.
func (c FileContract) OrJSON() FileContract {
	if c == "" {
		return ContractJSON
	}
	return c
}

// defaultArgv is c's default command template, extra args after the script.
func (c FileContract) defaultArgv(inFlag, outFlag string, extra []string) []string {
	head := append([]string{"{python}", "{script}"}, extra...)
	switch c {
	case ContractSubstrateCSV:
		return append(head, "{input}", "{output}", "{kinetics_type}")
	case ContractReactionCSV, ContractSubstrateTSV:
		return append(head, "{input}", "{output}")
	case ContractMethodA:
		return append(head, "--mode", "predict", "--task", "{task}", "--model_config", "{model_config}",
			"--save_results", "{output}", "--data_path", "{input}")
	}
	return append(head, inFlag, "{input}", outFlag, "{output}")
}

// Input formats of a descriptor: which CSV schema its engine reads.
const (
	// InputSingle reads `Substrate` (one SMILES/InChI, co-substrates dot-joined).
	InputSingle = "single"
	// InputMulti reads `Substrates` and `Products` (full reaction; method D).
	InputMulti = "multi"
)

// ProteinSequenceColumn is the input column every method requires.
const ProteinSequenceColumn = "Protein Sequence"

// Planner profiles: which cache families a method's plan expects
// (docs/embedding.md, "Layout").
const (
	ProfileMethodAFull           = "methoda_full"
	ProfileProtT5Mean            = "prot_t5_mean"
	ProfileMethodDESM1b          = "methodd_esm1b"
	ProfileMethodEEmbed          = "methode_embed"
	ProfileMethodFESM1v          = "methodf_esm1v"
	ProfileMethodGESM2           = "methodg_esm2"
	ProfileMethodHESM2LastMean   = "methodh_esm2_last_mean"
	ProfileMethodIProtT5Residues = "methodi_prot_t5_residues"
	ProfileMethodKESMCMean       = "methodk_esmc_mean"
	// ProfileNone is the empty profile of a method without shared-cache
	// planning (method J).
	ProfileNone = ""
)

// Profiles returns every planner profile kinflow knows, ProfileNone excluded.
func Profiles() []string {
	return []string{ProfileMethodAFull, ProfileProtT5Mean, ProfileMethodDESM1b, ProfileMethodEEmbed,
		ProfileMethodFESM1v, ProfileMethodGESM2, ProfileMethodHESM2LastMean, ProfileMethodIProtT5Residues,
		ProfileMethodKESMCMean}
}

// ColumnKwarg is one entry of a descriptor's ordered column mapping: the CSV
// column and the engine argument (row key) it feeds.
type ColumnKwarg struct {
	Column string `json:"column" yaml:"column"`
	Kwarg  string `json:"kwarg" yaml:"kwarg"`
}

// EnvVar is one environment variable passed to a method's prediction
// process. Value is a template; the runtime (RunCommand)
// replaces these placeholders and keeps the rest literal:
//
//   - {media}: the media root (KINFLOW_MEDIA_ROOT); for the command
//     engine, the stage's private view of it (CommandRequest.View)
//   - {sequence_info}: <media root>/sequence_info, the shared embedding
//     cache; for the command engine, the view's sequence_info/
//   - {methode_checkpoint_root}: METHODE_CHECKPOINT_ROOT
//   - {methodj_cache_dir}: METHODJ_CACHE_DIR
//   - {methodf_delete_embeddings}: always 0 (kinflow's Cleanup deletes
//     ephemeral artefacts)
//   - {tools}, {model_dir}, {data_dir}, {esm_python}, {esmc_python},
//     {t5_python}, {pseq2sites_python}: the method's command.paths entries
//   - {folder:<family>}: the absolute folder of the cache family named
//     <family> (kinflow's family name, e.g. {folder:methodg_esm2}) under the
//     worker's folder naming, KINFLOW_CACHE_FOLDERS (omniesi_esm2 with
//     `reference`); a name that is no family fails the catalogue's load
//
// A variable whose value still holds a placeholder after rendering is left
// unset.
type EnvVar struct {
	Name  string `json:"name" yaml:"name"`
	Value string `json:"value" yaml:"value"`
}

// Command is the command template of a method's prediction process for the
// command engine. Each token of Argv may contain placeholders, replaced
// inside the token: {python}, {script}, {input}, {output}, {target},
// {kinetics_type}, {task}, {model_config}, {job_id}, {media}, and every
// key of Paths. When Argv is empty the default of the method's file
// contract is used (FileContract; for the generic engine `{python}
// {script} <extra_args…> <input_flag> {input} <output_flag> {output}`).
type Command struct {
	Argv       []string `json:"argv,omitempty" yaml:"argv,omitempty"`
	Python     string   `json:"python,omitempty" yaml:"python,omitempty"`
	Script     string   `json:"script,omitempty" yaml:"script,omitempty"`
	InputFlag  string   `json:"input_flag,omitempty" yaml:"input_flag,omitempty"`
	OutputFlag string   `json:"output_flag,omitempty" yaml:"output_flag,omitempty"`
	ExtraArgs  []string `json:"extra_args,omitempty" yaml:"extra_args,omitempty"`
	// ExtraEnv holds literal environment variables for the process.
	ExtraEnv map[string]string `json:"extra_env,omitempty" yaml:"extra_env,omitempty"`
	// WorkDir is the process's working directory; empty: inherited.
	WorkDir string `json:"workdir,omitempty" yaml:"workdir,omitempty"`
	// Paths is the method's path map (the reference's DATA_PATHS entries):
	// tools, model_dir, data_dir and the interpreters esm_python,
	// esmc_python, t5_python, pseq2sites_python. Each fills the placeholder
	// of its name in EnvPaths and Argv.
	Paths map[string]string `json:"paths,omitempty" yaml:"paths,omitempty"`
}

// PathKeys are the keys Command.Paths accepts.
func PathKeys() []string {
	return []string{"tools", "model_dir", "data_dir", "esm_python", "esmc_python", "t5_python", "pseq2sites_python"}
}

// Default flag names of the generic engine, the reference's.
const (
	DefaultInputFlag  = "--input"
	DefaultOutputFlag = "--output"
)

// Render returns the argv of c (or of contract's default command line) with
// every placeholder of vars and of c.Paths ({name} → value) replaced inside
// each token. Placeholders without a value stay as
// they are, so a typo shows up in the process's own error.
func (c *Command) Render(contract FileContract, vars map[string]string) []string {
	vals := map[string]string{"python": c.Python, "script": c.Script}
	for k, v := range c.Paths {
		vals[k] = v
	}
	for k, v := range vars {
		vals[k] = v
	}
	tmpl := c.Argv
	if len(tmpl) == 0 {
		in, out := c.InputFlag, c.OutputFlag
		if in == "" {
			in = DefaultInputFlag
		}
		if out == "" {
			out = DefaultOutputFlag
		}
		tmpl = contract.OrJSON().defaultArgv(in, out, c.ExtraArgs)
	}
	pairs := make([]string, 0, 2*len(vals))
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		pairs = append(pairs, "{"+k+"}", vals[k])
	}
	r := strings.NewReplacer(pairs...)
	out := make([]string, 0, len(tmpl))
	for _, tok := range tmpl {
		if tok == "" {
			continue
		}
		out = append(out, r.Replace(tok))
	}
	// Drop an empty interpreter so a script with a shebang runs directly.
	if len(out) > 0 && out[0] == "" {
		out = out[1:]
	}
	return out
}

// Descriptor is one prediction method, shaped like the reference's method
// descriptor.
type Descriptor struct {
	// Key is the stable, case-sensitive id used in the API.
	Key              string `json:"key" yaml:"key"`
	DisplayName      string `json:"display_name" yaml:"display_name"`
	Authors          string `json:"authors" yaml:"authors"`
	PublicationTitle string `json:"publication_title" yaml:"publication_title"`
	CitationURL      string `json:"citation_url" yaml:"citation_url"`
	RepoURL          string `json:"repo_url" yaml:"repo_url"`
	MoreInfo         string `json:"more_info" yaml:"more_info"`
	// Supports lists the targets in declared order.
	Supports []Target `json:"supports" yaml:"supports"`
	// InputFormat is InputSingle or InputMulti.
	InputFormat string `json:"input_format" yaml:"input_format"`
	// InputBehaviors overrides, per target, how a `Substrates` list reaches
	// the model: units.NativeMulti sends the ordered list
	// whole. Unset targets get the default of InputBehavior.
	InputBehaviors map[Target]string `json:"input_behaviors,omitempty" yaml:"input_behaviors,omitempty"`
	// OutputCols maps each supported target to its result column header.
	OutputCols map[Target]string `json:"output_cols" yaml:"output_cols"`
	// MaxSeqLen is the longest sequence the method accepts; 0 = unlimited.
	MaxSeqLen int `json:"max_seq_len" yaml:"max_seq_len"`
	// ColToKwarg is the ordered CSV column → engine argument mapping; its
	// columns, after `Protein Sequence`, are the required input columns.
	ColToKwarg []ColumnKwarg `json:"col_to_kwarg" yaml:"col_to_kwarg"`
	// TargetKwargs maps a target to the static engine arguments for it.
	// They are text: the json contract writes each one into the input's
	// `params` as a JSON string. A boolean or a number belongs in Params
	// (Parse refuses one here, since "false" would reach a Python program
	// as a true value).
	TargetKwargs map[Target]map[string]string `json:"target_kwargs" yaml:"target_kwargs"`
	// Params maps a target to typed static arguments of the json contract:
	// each value reaches the input's `params` as the JSON value it is
	// (true/false, a number, a string, a list), after TargetKwargs and
	// replacing one of the same name. Only the json contract has params.
	Params map[Target]map[string]any `json:"params,omitempty" yaml:"params,omitempty"`
	// Engine is how predictions run.
	Engine EngineKind `json:"engine" yaml:"engine"`
	// Profile is the planner profile; ProfileNone for no shared-cache plan.
	Profile string `json:"profile" yaml:"profile"`
	// GPUEligible says whether missing embeddings may be sent to the GPU service.
	GPUEligible bool `json:"gpu_eligible" yaml:"gpu_eligible"`
	// StepKeys are the GPU step keys the method's plans can hold.
	StepKeys []string `json:"step_keys" yaml:"step_keys"`
	// EmbeddingsUsed is informational.
	EmbeddingsUsed []string `json:"embeddings_used" yaml:"embeddings_used"`
	// EphemeralFamilies are the cache families whose files the method's
	// prediction consumes and which are deleted after it (full residue
	// matrices, too large to keep).
	EphemeralFamilies []string `json:"ephemeral_families" yaml:"ephemeral_families"`
	// EnvPaths are the environment variables given to the prediction process.
	EnvPaths []EnvVar `json:"env_paths" yaml:"env_paths"`
	// Command is the command-engine process; nil: no command configured
	// (the synthetic engine still runs).
	Command *Command `json:"command,omitempty" yaml:"command,omitempty"`
	// FileContract is the files the command reads and writes; empty: json.
	FileContract FileContract `json:"file_contract,omitempty" yaml:"file_contract,omitempty"`
	// ModelVersion is the method's model version (the reference's 2026
	// rule): bump it whenever a change would alter predicted values. Empty
	// in a descriptor is DefaultModelVersion (set by New).
	ModelVersion string `json:"model_version,omitempty" yaml:"model_version,omitempty"`
	// Uncertainty says that the method gives, with each value, its own
	// uncertainty (standard deviations of log10 of the value; the JSON
	// contract's `uncertainties`): the result then has the uncertainty
	// columns of its target, and /methods/ says so.
	Uncertainty bool `json:"uncertainty,omitempty" yaml:"uncertainty,omitempty"`
	// UncertaintyFrom, when set, names where the JSON contract's output
	// gives each row's uncertainty in place of `uncertainties` (for a
	// program that passes CatPred's own per-row numbers through). Needs
	// Uncertainty.
	UncertaintyFrom *UncertaintySource `json:"uncertainty_from,omitempty" yaml:"uncertainty_from,omitempty"`
	// Progress is how the program reports progress: `lines` (the default,
	// `Progress: x/y` on stdout) or `tqdm` (its tqdm bars as well, see
	// ProgressTqdm).
	Progress ProgressForm `json:"progress,omitempty" yaml:"progress,omitempty"`
	// Outputs declares, per target, the form of the program's answer
	// (output.go): linear (the default), log10, or range-class midpoints.
	// kinflow converts each answer into the column's value and fails the
	// row of an answer not in that form.
	Outputs map[Target]Output `json:"outputs,omitempty" yaml:"outputs,omitempty"`
	// RowSeqID gives each row of the generic JSON contract its `seq_id`:
	// the id of its sequence in kinflow's id store and shared cache, so a
	// program that keeps files per sequence finds them under kinflow's ids.
	RowSeqID bool `json:"row_seq_id,omitempty" yaml:"row_seq_id,omitempty"`
}

// DefaultModelVersion is the model version of every method that names none.
const DefaultModelVersion = "1"

// Input behaviours of a method per target (/methods/
// inputBehaviorByTarget); the same
// words as internal/units.
const (
	BehaviorExpandedPair       = "expanded_pair"
	BehaviorNativeMulti        = "native_multi"
	BehaviorNativeFullReaction = "native_full_reaction"
)

// CSV input types a method accepts (/methods/ acceptedCsvTypes): a
// `Substrate` column, a `Substrates` list, `Substrates` + `Products`.
const (
	CSVSingle       = "single"
	CSVMulti        = "multi"
	CSVFullReaction = "full_reaction"
)

// InputBehavior is how d takes a substrate list for target t: the
// descriptor's override, else native_full_reaction for a full-reaction
// method and expanded_pair for every single-substrate one.
func (d *Descriptor) InputBehavior(t Target) string {
	if b := d.InputBehaviors[t]; b != "" {
		return b
	}
	if d.InputFormat == InputMulti {
		return BehaviorNativeFullReaction
	}
	return BehaviorExpandedPair
}

// AcceptedCSVTypes are the CSV input types d accepts for target t.
// expanded_pair takes all three (Products carried, unused); native_multi
// takes a list with or without Products and, in kinflow, also a `Substrate`
// cell as a one-cell list (the older wire keeps working);
// native_full_reaction needs Substrates and Products.
func (d *Descriptor) AcceptedCSVTypes(t Target) []string {
	if d.InputBehavior(t) == BehaviorNativeFullReaction {
		return []string{CSVFullReaction}
	}
	return []string{CSVSingle, CSVMulti, CSVFullReaction}
}

// Supported reports whether d predicts t.
func (d *Descriptor) Supported(t Target) bool { return slices.Contains(d.Supports, t) }

// RequiredColumns is `Protein Sequence` followed by the mapped columns in
// declared order.
func (d *Descriptor) RequiredColumns() []string {
	out := []string{ProteinSequenceColumn}
	for _, ck := range d.ColToKwarg {
		if !slices.Contains(out, ck.Column) {
			out = append(out, ck.Column)
		}
	}
	return out
}

// StepKeysFor returns the GPU step keys a plan for (d, t) may hold, in plan
// order: method A's three steps, method E's per-target step, or the one step
// named like the profile; none for a method without a profile.
func (d *Descriptor) StepKeysFor(t Target) []string {
	switch d.Profile {
	case ProfileMethodAFull:
		return []string{StepMethodAT5Full, StepMethodAESM2Layers, StepMethodAESMCLayers}
	case ProfileMethodEEmbed:
		switch t {
		case Kcat:
			return []string{StepMethodEEmbedKcat}
		case Km:
			return []string{StepMethodEEmbedKm}
		}
		return nil
	case ProfileNone:
		return nil
	}
	return []string{d.Profile}
}

// Clone returns a deep copy of d.
func (d *Descriptor) Clone() *Descriptor {
	c := *d
	c.Supports = slices.Clone(d.Supports)
	c.ColToKwarg = slices.Clone(d.ColToKwarg)
	c.StepKeys = slices.Clone(d.StepKeys)
	c.EmbeddingsUsed = slices.Clone(d.EmbeddingsUsed)
	c.EphemeralFamilies = slices.Clone(d.EphemeralFamilies)
	c.EnvPaths = slices.Clone(d.EnvPaths)
	if d.OutputCols != nil {
		c.OutputCols = make(map[Target]string, len(d.OutputCols))
		for k, v := range d.OutputCols {
			c.OutputCols[k] = v
		}
	}
	if d.InputBehaviors != nil {
		c.InputBehaviors = make(map[Target]string, len(d.InputBehaviors))
		for k, v := range d.InputBehaviors {
			c.InputBehaviors[k] = v
		}
	}
	if d.TargetKwargs != nil {
		c.TargetKwargs = make(map[Target]map[string]string, len(d.TargetKwargs))
		for k, v := range d.TargetKwargs {
			m := make(map[string]string, len(v))
			for kk, vv := range v {
				m[kk] = vv
			}
			c.TargetKwargs[k] = m
		}
	}
	if d.Params != nil {
		c.Params = make(map[Target]map[string]any, len(d.Params))
		for k, v := range d.Params {
			c.Params[k] = maps.Clone(v)
		}
	}
	if d.Outputs != nil {
		c.Outputs = make(map[Target]Output, len(d.Outputs))
		for k, v := range d.Outputs {
			v.Edges = slices.Clone(v.Edges)
			v.Ranges = slices.Clone(v.Ranges)
			c.Outputs[k] = v
		}
	}
	if d.UncertaintyFrom != nil {
		u := *d.UncertaintyFrom
		c.UncertaintyFrom = &u
	}
	if d.Command != nil {
		cmd := *d.Command
		cmd.Argv = slices.Clone(d.Command.Argv)
		cmd.ExtraArgs = slices.Clone(d.Command.ExtraArgs)
		if d.Command.ExtraEnv != nil {
			cmd.ExtraEnv = make(map[string]string, len(d.Command.ExtraEnv))
			for k, v := range d.Command.ExtraEnv {
				cmd.ExtraEnv[k] = v
			}
		}
		if d.Command.Paths != nil {
			cmd.Paths = make(map[string]string, len(d.Command.Paths))
			for k, v := range d.Command.Paths {
				cmd.Paths[k] = v
			}
		}
		c.Command = &cmd
	}
	return &c
}

// Validate checks d's internal consistency.
func (d *Descriptor) Validate() error {
	if d.Key == "" {
		return fmt.Errorf("method: empty key")
	}
	if strings.TrimSpace(d.Key) != d.Key {
		return fmt.Errorf("method %q: key has surrounding spaces", d.Key)
	}
	if d.DisplayName == "" {
		return fmt.Errorf("method %q: empty display_name", d.Key)
	}
	if len(d.Supports) == 0 {
		return fmt.Errorf("method %q: supports no target", d.Key)
	}
	seen := map[Target]bool{}
	for _, t := range d.Supports {
		if _, ok := ParseTarget(string(t)); !ok {
			return fmt.Errorf("method %q: unknown target %q (want kcat, Km or kcat/Km)", d.Key, t)
		}
		if seen[t] {
			return fmt.Errorf("method %q: target %q listed twice", d.Key, t)
		}
		seen[t] = true
		if d.OutputCols[t] == "" {
			return fmt.Errorf("method %q: no output column for target %q", d.Key, t)
		}
	}
	for t, o := range d.Outputs {
		if !seen[t] {
			return fmt.Errorf("method %q: outputs for unsupported target %q", d.Key, t)
		}
		if err := o.validate(); err != nil {
			return fmt.Errorf("method %q: outputs %s: %w", d.Key, t, err)
		}
		if o.IsRange() && d.Uncertainty {
			return fmt.Errorf("method %q: a range-class target has no uncertainty columns", d.Key)
		}
	}
	for t := range d.Params {
		if !seen[t] {
			return fmt.Errorf("method %q: params for unsupported target %q", d.Key, t)
		}
		if d.FileContract.OrJSON() != ContractJSON {
			return fmt.Errorf("method %q: params need file_contract json (only its input file has params)", d.Key)
		}
	}
	if d.InputFormat != InputSingle && d.InputFormat != InputMulti {
		return fmt.Errorf("method %q: input_format %q (want single or multi)", d.Key, d.InputFormat)
	}
	for t, b := range d.InputBehaviors {
		if !seen[t] {
			return fmt.Errorf("method %q: input_behaviors for unsupported target %q", d.Key, t)
		}
		switch b {
		case BehaviorExpandedPair, BehaviorNativeMulti:
			if d.InputFormat == InputMulti {
				return fmt.Errorf("method %q: input_behaviors %q for a full-reaction method", d.Key, b)
			}
		case BehaviorNativeFullReaction:
			if d.InputFormat != InputMulti {
				return fmt.Errorf("method %q: native_full_reaction needs input_format multi", d.Key)
			}
		default:
			return fmt.Errorf("method %q: input_behaviors %q (want expanded_pair, native_multi or native_full_reaction)", d.Key, b)
		}
	}
	if d.MaxSeqLen < 0 {
		return fmt.Errorf("method %q: negative max_seq_len", d.Key)
	}
	if !d.Engine.valid() {
		return fmt.Errorf("method %q: engine %q (want dedicated, generic or batch_script)", d.Key, d.Engine)
	}
	switch d.Progress {
	case "", ProgressLines, ProgressTqdm:
	default:
		return fmt.Errorf("method %q: progress %q (want lines or tqdm)", d.Key, d.Progress)
	}
	if u := d.UncertaintyFrom; u != nil {
		if !d.Uncertainty {
			return fmt.Errorf("method %q: uncertainty_from needs uncertainty: true", d.Key)
		}
		if d.FileContract.OrJSON() != ContractJSON {
			return fmt.Errorf("method %q: uncertainty_from needs the json file contract", d.Key)
		}
		if err := u.validate(); err != nil {
			return fmt.Errorf("method %q: uncertainty_from: %w", d.Key, err)
		}
	}
	if d.FileContract != "" && !slices.Contains(FileContracts(), d.FileContract) {
		return fmt.Errorf("method %q: file_contract %q (want json, substrate_csv, reaction_csv, methoda or substrate_tsv)", d.Key, d.FileContract)
	}
	if d.FileContract == ContractReactionCSV && d.InputFormat != InputMulti {
		return fmt.Errorf("method %q: file_contract reaction_csv needs input_format multi", d.Key)
	}
	if d.FileContract == ContractSubstrateTSV && d.InputFormat == InputMulti {
		return fmt.Errorf("method %q: file_contract substrate_tsv needs input_format single", d.Key)
	}
	if d.Command != nil {
		for k := range d.Command.Paths {
			if !slices.Contains(PathKeys(), k) {
				return fmt.Errorf("method %q: command.paths key %q (want one of %s)", d.Key, k, strings.Join(PathKeys(), ", "))
			}
		}
	}
	if d.Profile != ProfileNone && !slices.Contains(Profiles(), d.Profile) {
		return fmt.Errorf("method %q: unknown profile %q", d.Key, d.Profile)
	}
	if d.Profile == ProfileNone && d.GPUEligible {
		return fmt.Errorf("method %q: GPU-eligible without a planner profile", d.Key)
	}
	cols := map[string]bool{}
	for _, ck := range d.ColToKwarg {
		if ck.Column == "" || ck.Kwarg == "" {
			return fmt.Errorf("method %q: col_to_kwarg entry with an empty column or kwarg", d.Key)
		}
		if cols[ck.Column] {
			return fmt.Errorf("method %q: column %q mapped twice", d.Key, ck.Column)
		}
		cols[ck.Column] = true
	}
	for _, s := range d.StepKeys {
		if !IsActiveStep(s) {
			return fmt.Errorf("method %q: unknown step key %q", d.Key, s)
		}
	}
	return d.validateFolders()
}
