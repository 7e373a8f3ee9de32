package methods

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Catalogue is the registry of every method descriptor. Keys are unique and
// the registry order is the sorted order of the keys (`A-H`, `A-L`, `B` …
// `J`), so /methods/ and the error messages list them the same way. A Catalogue is read-only after construction and safe
// for concurrent use; the descriptors it hands out must not be modified.
type Catalogue struct {
	list  []*Descriptor
	byKey map[string]*Descriptor
	// similarity are the training-set datasets (similarity.go).
	similarity []SimilarityDataset
}

// New builds a catalogue from descs after validating each one. A duplicate
// key is an error.
func New(descs []*Descriptor) (*Catalogue, error) {
	c := &Catalogue{byKey: make(map[string]*Descriptor, len(descs)), similarity: DefaultSimilarityDatasets()}
	for _, d := range descs {
		if d == nil {
			return nil, fmt.Errorf("method catalogue: nil descriptor")
		}
		if err := d.Validate(); err != nil {
			return nil, fmt.Errorf("method catalogue: %w", err)
		}
		if d.ModelVersion == "" {
			d.ModelVersion = DefaultModelVersion
		}
		if _, dup := c.byKey[d.Key]; dup {
			return nil, fmt.Errorf("method catalogue: duplicate method key %q", d.Key)
		}
		c.byKey[d.Key] = d
		c.list = append(c.list, d)
	}
	sort.Slice(c.list, func(i, j int) bool { return c.list[i].Key < c.list[j].Key })
	return c, nil
}

// Get returns the descriptor of key (case-sensitive).
func (c *Catalogue) Get(key string) (*Descriptor, bool) {
	d, ok := c.byKey[key]
	return d, ok
}

// All returns every descriptor in registry order.
func (c *Catalogue) All() []*Descriptor { return slices.Clone(c.list) }

// Keys returns every method key in registry order.
func (c *Catalogue) Keys() []string {
	out := make([]string, len(c.list))
	for i, d := range c.list {
		out[i] = d.Key
	}
	return out
}

// ForTarget returns the descriptors that support t, in registry order.
func (c *Catalogue) ForTarget(t Target) []*Descriptor {
	var out []*Descriptor
	for _, d := range c.list {
		if d.Supported(t) {
			out = append(out, d)
		}
	}
	return out
}

// ValidKeys returns the sorted keys of the methods that support t, as used
// in error messages.
func (c *Catalogue) ValidKeys(t Target) []string {
	var out []string
	for _, d := range c.list {
		if d.Supported(t) {
			out = append(out, d.Key)
		}
	}
	sort.Strings(out)
	return out
}

// RequiredColumns returns `Protein Sequence` plus the mapped columns of key's
// method; false when key is unknown.
func (c *Catalogue) RequiredColumns(key string) ([]string, bool) {
	d, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	return d.RequiredColumns(), true
}

// Default returns the built-in catalogue.
func Default() *Catalogue {
	c, err := New(builtin())
	if err != nil {
		// The built-in table is covered by tests; failing here is a
		// programming error, never a user input.
		panic(err)
	}
	return c
}

// File is the operator catalogue file (KINFLOW_METHODS_FILE), JSON or YAML.
// Its steps apply in this order: start from Base, Remove keys, Rename keys
// (all renames at once), then each Methods entry either overrides fields of
// the method with that key (only the fields it names; maps are merged, lists
// replaced) or, for a new key, adds a full descriptor.
//
// Base "reference" is the built-in table under the reference deployment's
// method keys (KinForm-H … CatRange), each with its program's environment
// names, row keys, parameters and publication (reference.go): its operator
// names only each method's command (python, script, paths).
//
//	base: builtin            # or "empty" (no methods), or "reference"
//	remove: [J]
//	rename: {A-H: A-high}
//	methods:
//	  - key: B
//	    command: {python: /opt/b/bin/python, script: /opt/b/predict.py}
//	similarity:              # replaces the default datasets when present
//	  - {label: B, fasta: fastas/B_sequences.fasta, methods: [B]}
type File struct {
	Base    string            `json:"base" yaml:"base"`
	Remove  []string          `json:"remove" yaml:"remove"`
	Rename  map[string]string `json:"rename" yaml:"rename"`
	Methods []yaml.Node       `json:"methods" yaml:"methods"`
	// Similarity, when present, replaces DefaultSimilarityDatasets (whose
	// method keys follow Rename).
	Similarity *[]SimilarityDataset `json:"similarity" yaml:"similarity"`
}

// Load reads the operator catalogue file at path; an empty path is the
// built-in catalogue.
func Load(path string) (*Catalogue, error) {
	if path == "" {
		return Default(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read method catalogue: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("method catalogue %s: %w", path, err)
	}
	return c, nil
}

// Parse builds a catalogue from an operator file's contents (JSON or YAML;
// JSON is read as YAML, of which it is a subset).
func Parse(data []byte) (*Catalogue, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return Default(), nil
		}
		return nil, fmt.Errorf("parse: %w", err)
	}
	if err := checkTargetKwargs(f.Methods); err != nil {
		return nil, err
	}
	var list []*Descriptor
	similarity := DefaultSimilarityDatasets()
	switch f.Base {
	case "", "builtin":
		list = builtin()
	case "empty":
	case "reference":
		list = reference(builtin())
		similarity = renameSimilarity(similarity, referenceKeys())
	default:
		return nil, fmt.Errorf("base %q: want builtin, empty or reference", f.Base)
	}
	index := func(key string) int {
		return slices.IndexFunc(list, func(d *Descriptor) bool { return d.Key == key })
	}
	for _, k := range f.Remove {
		i := index(k)
		if i < 0 {
			return nil, fmt.Errorf("remove: unknown method %q", k)
		}
		list = slices.Delete(list, i, i+1)
	}
	if len(f.Rename) > 0 {
		renamed := make([]*Descriptor, 0, len(f.Rename))
		olds := make([]string, 0, len(f.Rename))
		for old := range f.Rename {
			olds = append(olds, old)
		}
		sort.Strings(olds)
		for _, old := range olds {
			i := index(old)
			if i < 0 {
				return nil, fmt.Errorf("rename: unknown method %q", old)
			}
			d := list[i]
			list = slices.Delete(list, i, i+1)
			d.Key = f.Rename[old]
			renamed = append(renamed, d)
		}
		for _, d := range renamed {
			if index(d.Key) >= 0 || slices.ContainsFunc(renamed, func(o *Descriptor) bool { return o != d && o.Key == d.Key }) {
				return nil, fmt.Errorf("rename: method key %q would be used twice", d.Key)
			}
		}
		list = append(list, renamed...)
	}
	allowed := descriptorFieldNames()
	seen := map[string]bool{}
	for n := range f.Methods {
		node := &f.Methods[n]
		if node.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("methods[%d]: want a mapping", n)
		}
		var head struct {
			Key string `yaml:"key"`
		}
		for i := 0; i+1 < len(node.Content); i += 2 {
			name := node.Content[i].Value
			if !allowed[name] {
				return nil, fmt.Errorf("methods[%d]: unknown field %q", n, name)
			}
		}
		if err := node.Decode(&head); err != nil {
			return nil, fmt.Errorf("methods[%d]: %w", n, err)
		}
		if head.Key == "" {
			return nil, fmt.Errorf("methods[%d]: missing key", n)
		}
		if seen[head.Key] {
			return nil, fmt.Errorf("methods[%d]: duplicate method key %q", n, head.Key)
		}
		seen[head.Key] = true
		if i := index(head.Key); i >= 0 {
			d := list[i].Clone()
			if err := node.Decode(d); err != nil {
				return nil, fmt.Errorf("method %q: %w", head.Key, err)
			}
			list[i] = d
			continue
		}
		d := &Descriptor{InputFormat: InputSingle, Engine: EngineGeneric}
		if err := node.Decode(d); err != nil {
			return nil, fmt.Errorf("method %q: %w", head.Key, err)
		}
		list = append(list, d)
	}
	c, err := New(list)
	if err != nil {
		return nil, err
	}
	c.similarity = renameSimilarity(similarity, f.Rename)
	if f.Similarity != nil {
		c.similarity = *f.Similarity
	}
	if err := validateSimilarity(c.similarity); err != nil {
		return nil, err
	}
	return c, nil
}

// checkTargetKwargs refuses a boolean or number among the target_kwargs of
// the file's methods: target kwargs are text, so `false` would reach a
// program's params as the string "false", which Python reads as true. Such
// a value belongs in `params`, which keeps its JSON type.
func checkTargetKwargs(nodes []yaml.Node) error {
	for n := range nodes {
		node := &nodes[n]
		if node.Kind != yaml.MappingNode {
			continue
		}
		for i := 0; i+1 < len(node.Content); i += 2 {
			if node.Content[i].Value != "target_kwargs" || node.Content[i+1].Kind != yaml.MappingNode {
				continue
			}
			targets := node.Content[i+1].Content
			for j := 0; j+1 < len(targets); j += 2 {
				if targets[j+1].Kind != yaml.MappingNode {
					continue
				}
				kw := targets[j+1].Content
				for k := 0; k+1 < len(kw); k += 2 {
					v := kw[k+1]
					if v.Kind == yaml.ScalarNode && (v.Tag == "!!bool" || v.Tag == "!!int" || v.Tag == "!!float") {
						return fmt.Errorf("methods[%d]: target_kwargs %s.%s is a %s: write it under params (kept as a JSON %s) or quote it",
							n, targets[j].Value, kw[k].Value, strings.TrimPrefix(v.Tag, "!!"), jsonKind(v.Tag))
					}
				}
			}
		}
	}
	return nil
}

func jsonKind(tag string) string {
	if tag == "!!bool" {
		return "boolean"
	}
	return "number"
}

// descriptorFieldNames is the set of YAML/JSON field names of Descriptor.
func descriptorFieldNames() map[string]bool {
	out := map[string]bool{}
	t := reflect.TypeOf(Descriptor{})
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			out[name] = true
		}
	}
	return out
}

// Column headers of the result, verbatim (clients match them).
const (
	ColumnKcat   = "kcat (1/s)"
	ColumnKm     = "KM (mM)"
	ColumnKcatKm = "kcat/Km (1/(s*mM))"
)

// builtinKineticsTypes are the engine arguments naming each target's
// kinetics type.
func builtinKineticsTypes(ts ...Target) map[Target]map[string]string {
	m := map[Target]map[string]string{}
	for _, t := range ts {
		m[t] = map[string]string{"kinetics_type": strings.ToUpper(string(t))}
	}
	return m
}

// builtinVariant adds the variant argument to every target's arguments.
func builtinVariant(m map[Target]map[string]string, v string) map[Target]map[string]string {
	for _, kw := range m {
		kw["variant"] = v
	}
	return m
}

// builtinBiblio sets d's bibliography. The spec anonymises the methods;
// these placeholders are neutral on purpose and an operator file can set
// the real references.
func builtinBiblio(d *Descriptor, label string) *Descriptor {
	d.DisplayName = "Method " + label
	d.Authors = "Authors of method " + label
	d.PublicationTitle = "Publication of method " + label
	d.CitationURL = "https://example.org/methods/" + strings.ToLower(label)
	d.RepoURL = "https://example.org/methods/" + strings.ToLower(label) + "/code"
	return d
}

// builtinEnv is the environment variables of name, value pairs.
func builtinEnv(kv ...string) []EnvVar {
	out := make([]EnvVar, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, EnvVar{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

// builtinMethodA is a variant of method A (its own model_variant) for
// the targets it supports.
func builtinMethodA(label, variant string, single []ColumnKwarg, kcatKm map[Target]string, supports ...Target) *Descriptor {
	cols := map[Target]string{}
	tk := builtinKineticsTypes(supports...)
	for _, t := range supports {
		cols[t] = kcatKm[t]
		tk[t]["model_variant"] = variant
	}
	return builtinBiblio(&Descriptor{
		Key: label, Supports: supports, InputFormat: InputSingle, OutputCols: cols, MaxSeqLen: 1500,
		ColToKwarg: single, TargetKwargs: tk, Engine: EngineDedicated, FileContract: ContractMethodA,
		Profile:        ProfileMethodAFull,
		GPUEligible:    true,
		StepKeys:       []string{StepMethodAT5Full, StepMethodAESM2Layers, StepMethodAESMCLayers},
		EmbeddingsUsed: []string{"prot_t5", "esm2", "esmc", "binding_sites"},
		EnvPaths: builtinEnv("METHODA_MEDIA_PATH", "{media}", "METHODA_TOOLS_PATH", "{tools}",
			"METHODA_DATA", "{data_dir}", "METHODA_ESM_PATH", "{esm_python}",
			"METHODA_ESMC_PATH", "{esmc_python}", "METHODA_T5_PATH", "{t5_python}",
			"METHODA_PSEQ2SITES_PATH", "{pseq2sites_python}"),
	}, label)
}

// Range classes of method K (the reference's CatRange): kcat in s^-1 and Km
// in M, the edges its classifier was trained on.
var (
	methodKKcatEdges = []float64{0, 1e-8, 1e-2, 0.1, 1, 10, 100, 1000, 1e8}
	methodKKmEdges   = []float64{1e-14, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1e4}
)

// Classes of method H's classifiers (the reference's RealKcat): its
// program answers a class index; the reference serves the mean of the
// class's range, kcat in s^-1 and Km in M.
var (
	methodHKcatRanges = [][2]float64{{0, 3.32e-8}, {3.33e-8, 1e-2}, {1.01e-2, 1e-1}, {1.01e-1, 1}, {1.001, 10},
		{1.004e1, 1e2}, {1.0025e2, 1e3}, {1.002e3, 7e7}}
	methodHKmRanges = [][2]float64{{1e-10, 1e-5}, {1.01e-5, 1e-4}, {1.002e-4, 1e-3}, {1.002e-3, 1e-2},
		{1.008e-2, 1e-1}, {1.01e-1, 1.02e2}}
)

// builtin is the built-in catalogue (A–K), one descriptor per method key.
// Methods G, G-O2, H, I and K keep files per sequence, so their rows carry
// seq_id (RowSeqID): the id of the sequence's files in the shared cache,
// never a row position that another job's row would share.
func builtin() []*Descriptor {
	// The dedicated contracts (A, C, F) put the substrate in their own
	// file's column whatever its row key is; the json contract's programs
	// read the row key `substrates`, as every reference descriptor maps
	// the Substrate column (a row without it is invalid to them).
	single := []ColumnKwarg{{Column: "Substrate", Kwarg: "smiles"}}
	substrates := []ColumnKwarg{{Column: "Substrate", Kwarg: "substrates"}}
	kcatKm := map[Target]string{Kcat: ColumnKcat, Km: ColumnKm}
	return []*Descriptor{
		builtinMethodA("A-H", "H", single, kcatKm, Kcat, Km),
		builtinMethodA("A-L", "L", single, kcatKm, Kcat),
		builtinBiblio(&Descriptor{
			Key: "B", Supports: []Target{Kcat, Km, KcatKm}, InputFormat: InputSingle,
			OutputCols: map[Target]string{Kcat: ColumnKcat, Km: ColumnKm, KcatKm: ColumnKcatKm}, MaxSeqLen: 1000,
			ColToKwarg: substrates, TargetKwargs: builtinKineticsTypes(Kcat, Km, KcatKm), Engine: EngineGeneric,
			Profile: ProfileProtT5Mean, GPUEligible: true, StepKeys: []string{StepProtT5Mean},
			EmbeddingsUsed: []string{"prot_t5_mean"},
			EnvPaths:       builtinEnv("METHODB_MEDIA_PATH", "{media}", "METHODB_TOOLS_PATH", "{tools}", "METHODB_MODEL_ROOT", "{model_dir}"),
		}, "B"),
		builtinBiblio(&Descriptor{
			Key: "C", Supports: []Target{Kcat, Km}, InputFormat: InputSingle, OutputCols: kcatKm, MaxSeqLen: 1000,
			ColToKwarg: single, TargetKwargs: builtinKineticsTypes(Kcat, Km), Engine: EngineDedicated, FileContract: ContractSubstrateCSV,
			Profile: ProfileProtT5Mean, GPUEligible: true, StepKeys: []string{StepProtT5Mean},
			EmbeddingsUsed: []string{"prot_t5_mean"},
			EnvPaths:       builtinEnv("METHODC_MEDIA_PATH", "{media}", "METHODC_TOOLS_PATH", "{tools}"),
		}, "C"),
		builtinBiblio(&Descriptor{
			Key: "D", Supports: []Target{Kcat}, InputFormat: InputMulti,
			OutputCols: map[Target]string{Kcat: ColumnKcat}, MaxSeqLen: 1024,
			ColToKwarg: []ColumnKwarg{{Column: "Substrates", Kwarg: "substrates"}, {Column: "Products", Kwarg: "products"}},
			Engine:     EngineDedicated, FileContract: ContractReactionCSV, Profile: ProfileMethodDESM1b, GPUEligible: true,
			StepKeys: []string{StepMethodDESM1b}, EmbeddingsUsed: []string{"esm1b_methodd"},
			EnvPaths: builtinEnv("METHODD_MEDIA_PATH", "{media}", "METHODD_TOOLS_PATH", "{tools}"),
		}, "D"),
		builtinBiblio(&Descriptor{
			Key: "E", Supports: []Target{Kcat, Km}, InputFormat: InputSingle, OutputCols: kcatKm, MaxSeqLen: 2048,
			// Method E's kcat model reads the ordered substrate list whole.
			InputBehaviors: map[Target]string{Kcat: BehaviorNativeMulti},
			ColToKwarg:     substrates, TargetKwargs: builtinKineticsTypes(Kcat, Km), Engine: EngineGeneric,
			Profile: ProfileMethodEEmbed, GPUEligible: true,
			StepKeys:       []string{StepMethodEEmbedKcat, StepMethodEEmbedKm},
			EmbeddingsUsed: []string{"methode_esm2"},
			// CatPred's inference reports a standard deviation of log10 of
			// each value (total, aleatoric, epistemic) beside it. The
			// reference's program (its webKinPred adapter) drops them and
			// writes only predictions, invalid_indices and invalid_reasons:
			// with it the columns stay blank; a program that passes them on
			// in `uncertainties` (or lists named by uncertainty_from) fills
			// them.
			Uncertainty: true,
			// CatPred prints no `Progress:` line until it is done; its
			// progress is its tqdm bars on stderr: the ensemble's models,
			// each model's batches nested under them (the reference's
			// engine estimates CatPred's progress from the same bars).
			Progress: ProgressTqdm,
			// CatPred refuses checkpoints outside CATPRED_TRUSTED_DESERIALIZATION_ROOTS
			// (catpred/security/deserialization.py); the reference sets it to its
			// checkpoint folder.
			EnvPaths: builtinEnv("METHODE_REPO_ROOT", "{model_dir}", "METHODE_CHECKPOINT_ROOT", "{methode_checkpoint_root}",
				"CATPRED_TRUSTED_DESERIALIZATION_ROOTS", "{methode_checkpoint_root}",
				"METHODE_MEDIA_PATH", "{media}", "METHODE_TOOLS_PATH", "{tools}", "PROTEIN_EMBED_USE_CPU", "1"),
		}, "E"),
		builtinBiblio(&Descriptor{
			Key: "F", Supports: []Target{Kcat, Km}, InputFormat: InputSingle, OutputCols: kcatKm, MaxSeqLen: 1024,
			ColToKwarg: single, TargetKwargs: builtinKineticsTypes(Kcat, Km), Engine: EngineBatchScript, FileContract: ContractSubstrateCSV,
			Profile: ProfileMethodFESM1v, GPUEligible: true, StepKeys: []string{StepMethodFESM1v},
			EmbeddingsUsed: []string{"esm1v"}, EphemeralFamilies: []string{"esm1v"},
			EnvPaths: builtinEnv("METHODF_MEDIA_PATH", "{media}", "METHODF_TOOLS_PATH", "{tools}",
				"METHODF_DELETE_EMBEDDINGS_AFTER_RUN", "{methodf_delete_embeddings}"),
		}, "F"),
		builtinBiblio(&Descriptor{
			Key: "G", Supports: []Target{Kcat, Km}, InputFormat: InputSingle, OutputCols: kcatKm, RowSeqID: true, MaxSeqLen: 1000,
			ColToKwarg: substrates, TargetKwargs: builtinKineticsTypes(Kcat, Km), Engine: EngineGeneric,
			Profile: ProfileMethodGESM2, GPUEligible: true, StepKeys: []string{StepMethodGESM2},
			EmbeddingsUsed: []string{"methodg_esm2"}, EphemeralFamilies: []string{"methodg_esm2"},
			EnvPaths: builtinEnv("METHODG_EMBED_CACHE_DIR", "{folder:methodg_esm2}", "METHODG_CACHE_DIR", "{model_dir}",
				"METHODG_ADDITIONAL_DATA", "{data_dir}"),
		}, "G"),
		// G-O2 is a second variant of method G: method G's
		// profile, step and ephemeral family, its own checkpoint (the
		// operator's command.paths model_dir for this key).
		builtinBiblio(&Descriptor{
			Key: "G-O2", Supports: []Target{Kcat, Km}, InputFormat: InputSingle, OutputCols: kcatKm, RowSeqID: true, MaxSeqLen: 1000,
			ColToKwarg: substrates, TargetKwargs: builtinVariant(builtinKineticsTypes(Kcat, Km), "o2denet"), Engine: EngineGeneric,
			Profile: ProfileMethodGESM2, GPUEligible: true, StepKeys: []string{StepMethodGESM2},
			EmbeddingsUsed: []string{"methodg_esm2"}, EphemeralFamilies: []string{"methodg_esm2"},
			EnvPaths: builtinEnv("METHODG_EMBED_CACHE_DIR", "{folder:methodg_esm2}", "METHODG_CACHE_DIR", "{model_dir}",
				"METHODG_ADDITIONAL_DATA", "{data_dir}"),
		}, "G-O2"),
		builtinBiblio(&Descriptor{
			Key: "H", Supports: []Target{Kcat, Km}, InputFormat: InputSingle, OutputCols: kcatKm, RowSeqID: true, MaxSeqLen: 1022,
			ColToKwarg: substrates, TargetKwargs: builtinKineticsTypes(Kcat, Km), Engine: EngineGeneric,
			// Its Km classes are in M; the column is in mM.
			Outputs: map[Target]Output{
				Kcat: {Form: FormClassIndex, Ranges: slices.Clone(methodHKcatRanges)},
				Km:   {Form: FormClassIndex, Ranges: slices.Clone(methodHKmRanges), Factor: 1000},
			},
			Profile: ProfileMethodHESM2LastMean, GPUEligible: true, StepKeys: []string{StepMethodHESM2LastMean},
			EmbeddingsUsed: []string{"esm2_layer_last_mean"},
			EnvPaths:       builtinEnv("METHODH_DATA", "{model_dir}"),
		}, "H"),
		builtinBiblio(&Descriptor{
			Key: "I", Supports: []Target{KcatKm}, InputFormat: InputSingle, RowSeqID: true,
			OutputCols: map[Target]string{KcatKm: ColumnKcatKm}, MaxSeqLen: 1000,
			ColToKwarg: substrates, Engine: EngineGeneric,
			// Its program answers log10 of kcat/Km per (s·M); the column is
			// linear per (s·mM).
			Outputs: map[Target]Output{KcatKm: {Form: FormLog10, Factor: 0.001}},
			Profile: ProfileMethodIProtT5Residues, GPUEligible: true, StepKeys: []string{StepMethodIProtT5Residues},
			EmbeddingsUsed:    []string{"methodi_prot_t5_residues"},
			EphemeralFamilies: []string{"methodi_prot_t5_residues"},
			EnvPaths:          builtinEnv("METHODI_DATA", "{data_dir}", "METHODI_EMBED_DIR", "{folder:methodi_prot_t5_residues}"),
		}, "I"),
		builtinBiblio(&Descriptor{
			Key: "J", Supports: []Target{Km}, InputFormat: InputSingle,
			OutputCols: map[Target]string{Km: ColumnKm}, MaxSeqLen: 500,
			ColToKwarg: substrates, TargetKwargs: builtinKineticsTypes(Km), Engine: EngineGeneric,
			Profile: ProfileNone, GPUEligible: false,
			// Method J's contact-map cache is method-local, not shared;
			// its location is passed so the method's code can find it.
			EnvPaths: builtinEnv("METHODJ_CACHE_DIR", "{methodj_cache_dir}"),
		}, "J"),
		// Method K answers a range class (the class midpoint), not a value:
		// its columns hold the class's range text, in the program's own
		// units (s^-1, M), with the midpoint beside it.
		builtinBiblio(&Descriptor{
			Key: "K", Supports: []Target{Kcat, Km}, InputFormat: InputSingle,
			OutputCols: map[Target]string{Kcat: "Predicted kcat range: kcat (1/s)", Km: "Predicted KM range: kM (M)"},
			MaxSeqLen:  1024, ModelVersion: "2",
			MoreInfo: "Predicts the range class of each value (e.g. 1 to 10 s^-1), not a number: a class is not a confidence " +
				"interval or an error bound. Its columns hold the class's range as text, with the class midpoint beside it.",
			ColToKwarg: substrates, RowSeqID: true,
			TargetKwargs: builtinKineticsTypes(Kcat, Km), Engine: EngineGeneric,
			Outputs: map[Target]Output{
				Kcat: {Form: FormClassMidpoint, Edges: slices.Clone(methodKKcatEdges), Unit: "s^-1"},
				Km:   {Form: FormClassMidpoint, Edges: slices.Clone(methodKKmEdges), Unit: "M"},
			},
			Profile: ProfileMethodKESMCMean, GPUEligible: true, StepKeys: []string{StepMethodKESMCMean},
			EmbeddingsUsed: []string{"methodk_esmc"},
			EnvPaths: builtinEnv("METHODK_REPO_ROOT", "{model_dir}", "METHODK_MODELS_DIR", "{model_dir}",
				"METHODK_MEDIA_DIR", "{media}", "METHODK_ESMC_PYTHON", "{esmc_python}"),
		}, "K"),
		// Method L reads no protein-language-model embedding: its own graph
		// network and sequence model run inside its program, so it has no
		// planner profile and nothing to send to the GPU host. It takes any
		// length, within the server's own limit.
		builtinBiblio(&Descriptor{
			Key: "L", Supports: []Target{Kcat}, InputFormat: InputSingle,
			OutputCols: map[Target]string{Kcat: ColumnKcat},
			ColToKwarg: single, Engine: EngineDedicated, FileContract: ContractSubstrateTSV,
			Profile: ProfileNone, GPUEligible: false,
			EnvPaths: builtinEnv("METHODL_DATA_PATH", "{data_dir}", "METHODL_RESULTS_PATH", "{model_dir}"),
		}, "L"),
	}
}
