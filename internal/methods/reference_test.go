package methods

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// referenceWant is the reference key and the environment names each
// built-in label's program reads under the reference profile.
var referenceWant = map[string]struct {
	key string
	env []string
}{
	"A-H": {"KinForm-H", []string{"KINFORM_MEDIA_PATH", "KINFORM_TOOLS_PATH", "KINFORM_DATA", "KINFORM_ESM_PATH",
		"KINFORM_ESMC_PATH", "KINFORM_T5_PATH", "KINFORM_PSEQ2SITES_PATH"}},
	"A-L": {"KinForm-L", []string{"KINFORM_MEDIA_PATH", "KINFORM_TOOLS_PATH", "KINFORM_DATA", "KINFORM_ESM_PATH",
		"KINFORM_ESMC_PATH", "KINFORM_T5_PATH", "KINFORM_PSEQ2SITES_PATH"}},
	"B": {"CataPro", []string{"CATAPRO_MEDIA_PATH", "CATAPRO_TOOLS_PATH", "CATAPRO_MODEL_ROOT"}},
	"C": {"UniKP", []string{"UNIKP_MEDIA_PATH", "UNIKP_TOOLS_PATH"}},
	"D": {"TurNup", []string{"TURNUP_MEDIA_PATH", "TURNUP_TOOLS_PATH"}},
	"E": {"CatPred", []string{"CATPRED_REPO_ROOT", "CATPRED_CHECKPOINT_ROOT", "CATPRED_TRUSTED_DESERIALIZATION_ROOTS",
		"CATPRED_MEDIA_PATH", "CATPRED_TOOLS_PATH", "PROTEIN_EMBED_USE_CPU"}},
	"F": {"EITLEM", []string{"EITLEM_MEDIA_PATH", "EITLEM_TOOLS_PATH", "EITLEM_DELETE_EMBEDDINGS_AFTER_RUN"}},
	"G": {"OmniESI", []string{"OMNIESI_EMBED_CACHE_DIR", "OmniESI_CACHE_DIR", "OmniESI_ADDITIONAL_DATA",
		"OMNIESI_DELETE_EMBEDDINGS_AFTER_RUN"}},
	"G-O2": {"OmniESI-O2DENet", []string{"OMNIESI_EMBED_CACHE_DIR", "OmniESI_CACHE_DIR", "OmniESI_ADDITIONAL_DATA",
		"OMNIESI_DELETE_EMBEDDINGS_AFTER_RUN"}},
	"H": {"RealKcat", []string{"REALKCAT_DATA", "REALKCAT_EMBED_CACHE_DIR"}},
	"I": {"IECata", []string{"IECATA_DATA", "IECATA_EMBED_DIR"}},
	"J": {"MMISA-KM", nil},
	"K": {"CatRange", []string{"CATRANGE_REPO_ROOT", "CATRANGE_MODELS_DIR", "CATRANGE_MEDIA_DIR", "CATRANGE_ESMC_PYTHON"}},
	"L": {"DLKcat", []string{"DLKCAT_DATA_PATH", "DLKCAT_RESULTS_PATH"}},
}

func envValue(d *Descriptor, name string) (string, bool) {
	for _, ev := range d.EnvPaths {
		if ev.Name == name {
			return ev.Value, true
		}
	}
	return "", false
}

func TestReferenceProfile(t *testing.T) {
	c, err := Parse([]byte("base: reference\n"))
	if err != nil {
		t.Fatal(err)
	}
	builtins := Default()
	if len(c.Keys()) != len(builtins.Keys()) {
		t.Fatalf("reference keys %v, built-in %v", c.Keys(), builtins.Keys())
	}
	for _, b := range builtins.All() {
		w, ok := referenceWant[b.Key]
		if !ok {
			t.Errorf("built-in label %s has no reference key", b.Key)
			continue
		}
		d, ok := c.Get(w.key)
		if !ok {
			t.Errorf("%s: no %s in the reference profile", b.Key, w.key)
			continue
		}
		var names []string
		for _, ev := range d.EnvPaths {
			names = append(names, ev.Name)
		}
		if !reflect.DeepEqual(names, w.env) {
			t.Errorf("%s env %v, want %v", w.key, names, w.env)
		}
		// The built-in's contract stays.
		if d.FileContract != b.FileContract || d.Engine != b.Engine || d.Profile != b.Profile ||
			!reflect.DeepEqual(d.Supports, b.Supports) || !reflect.DeepEqual(d.OutputCols, b.OutputCols) ||
			!reflect.DeepEqual(d.Outputs, b.Outputs) || d.RowSeqID != b.RowSeqID || !reflect.DeepEqual(d.StepKeys, b.StepKeys) {
			t.Errorf("%s changed the built-in %s's contract", w.key, b.Key)
		}
		// Row keys: the reference's col_to_kwarg, same columns.
		for i, ck := range d.ColToKwarg {
			want := map[string]string{"Substrate": "substrates", "Substrates": "substrates", "Products": "products"}[ck.Column]
			if ck.Kwarg != want || ck.Column != b.ColToKwarg[i].Column {
				t.Errorf("%s column %s → %q, want %q", w.key, ck.Column, ck.Kwarg, want)
			}
		}
		// Real citations.
		for name, v := range map[string]string{"authors": d.Authors, "title": d.PublicationTitle, "citation": d.CitationURL, "repo": d.RepoURL} {
			if v == "" || strings.Contains(v, "example.org") || strings.Contains(v, "method "+b.Key) {
				t.Errorf("%s %s %q", w.key, name, v)
			}
		}
		if !strings.HasPrefix(d.RepoURL, "https://github.com/") || !strings.HasPrefix(d.CitationURL, "https://") {
			t.Errorf("%s urls %q %q", w.key, d.CitationURL, d.RepoURL)
		}
		if d.DisplayName == "" || strings.HasPrefix(d.DisplayName, "Method ") {
			t.Errorf("%s display name %q", w.key, d.DisplayName)
		}
		// The built-in keeps its neutral placeholders.
		if !strings.Contains(b.CitationURL, "example.org") || b.DisplayName != "Method "+b.Key {
			t.Errorf("built-in %s lost its placeholders: %q %q", b.Key, b.DisplayName, b.CitationURL)
		}
	}
	if d, _ := c.Get("DLKcat"); d == nil || d.FileContract != ContractSubstrateTSV || d.Profile != ProfileNone {
		t.Errorf("DLKcat: %+v", d)
	}
	if d, _ := c.Get("CatRange"); d.ModelVersion != "2" {
		t.Errorf("CatRange model_version %q", d.ModelVersion)
	}
	if d, _ := c.Get("EITLEM"); d.DisplayName != "EITLEM-Kinetics" {
		t.Errorf("EITLEM display name %q", d.DisplayName)
	}
	// No program deletes shared files itself.
	for key, want := range map[string]map[string]string{
		"EITLEM":          {"EITLEM_DELETE_EMBEDDINGS_AFTER_RUN": "0"},
		"OmniESI":         {"OMNIESI_DELETE_EMBEDDINGS_AFTER_RUN": "0", "OMNIESI_EMBED_CACHE_DIR": "{folder:methodg_esm2}"},
		"OmniESI-O2DENet": {"OMNIESI_DELETE_EMBEDDINGS_AFTER_RUN": "0", "OMNIESI_EMBED_CACHE_DIR": "{folder:methodg_esm2}"},
		"IECata":          {"IECATA_EMBED_DIR": "{folder:methodi_prot_t5_residues}", "IECATA_DATA": "{data_dir}"},
		"RealKcat":        {"REALKCAT_EMBED_CACHE_DIR": "{folder:esm2_layer_last_mean}", "REALKCAT_DATA": "{model_dir}"},
		"CatPred":         {"PROTEIN_EMBED_USE_CPU": "1", "CATPRED_CHECKPOINT_ROOT": "{methode_checkpoint_root}"},
		"CatRange":        {"CATRANGE_ESMC_PYTHON": "{esmc_python}", "CATRANGE_MEDIA_DIR": "{media}"},
		"KinForm-H":       {"KINFORM_ESMC_PATH": "{esmc_python}", "KINFORM_DATA": "{data_dir}"},
	} {
		d, _ := c.Get(key)
		for name, v := range want {
			if got, _ := envValue(d, name); got != v {
				t.Errorf("%s %s = %q, want %q", key, name, got, v)
			}
		}
	}
	for _, key := range []string{"OmniESI", "OmniESI-O2DENet"} {
		d, _ := c.Get(key)
		for _, tg := range d.Supports {
			if v, ok := d.Params[tg]["cleanup_embeddings_after_run"]; !ok || v != false {
				t.Errorf("%s %s cleanup_embeddings_after_run %#v", key, tg, v)
			}
		}
	}
	if d, _ := c.Get("OmniESI-O2DENet"); d.TargetKwargs[Km]["variant"] != "o2denet" || d.TargetKwargs[Km]["kinetics_type"] != "KM" {
		t.Errorf("O2DENet kwargs %v", d.TargetKwargs)
	}
	// The similarity datasets serve the reference keys.
	if ds, ok := c.SimilarityDatasetFor("KinForm-L"); !ok || !slices.Contains(ds.Methods, "EITLEM") {
		t.Errorf("KinForm-L similarity %+v %v", ds, ok)
	}
	if _, ok := c.SimilarityDatasetFor("F"); ok {
		t.Error("similarity still names label F")
	}
}

// TestBuiltinFolderTemplates: the env values that point at a family folder
// use {folder:<family>}, so they follow the operator's folder names.
func TestBuiltinFolderTemplates(t *testing.T) {
	c := Default()
	for key, want := range map[string][2]string{
		"G":    {"METHODG_EMBED_CACHE_DIR", "{folder:methodg_esm2}"},
		"G-O2": {"METHODG_EMBED_CACHE_DIR", "{folder:methodg_esm2}"},
		"I":    {"METHODI_EMBED_DIR", "{folder:methodi_prot_t5_residues}"},
	} {
		d, _ := c.Get(key)
		if got, _ := envValue(d, want[0]); got != want[1] {
			t.Errorf("%s %s = %q, want %q", key, want[0], got, want[1])
		}
	}
	// Until it is rendered, a folder placeholder leaves its variable unset
	// rather than handing the program the literal text.
	d, _ := c.Get("G")
	d = d.Clone()
	d.Command = &Command{}
	env, unset := commandEnv(d, nil, map[string]string{"model_dir": "/m", "data_dir": "/d"})
	if slices.ContainsFunc(env, func(s string) bool { return strings.HasPrefix(s, "METHODG_EMBED_CACHE_DIR=") }) ||
		len(unset) != 1 || !strings.Contains(unset[0], "{folder:methodg_esm2}") {
		t.Errorf("env %v, unset %v", env, unset)
	}
}

// TestBuiltinJSONRowsCarrySubstrates: every built-in json-contract method
// sends the Substrate column as `substrates`, the row key of the
// reference's programs.
func TestBuiltinJSONRowsCarrySubstrates(t *testing.T) {
	for _, d := range Default().All() {
		if d.FileContract.OrJSON() != ContractJSON {
			continue
		}
		for _, ck := range d.ColToKwarg {
			if ck.Column == "Substrate" && ck.Kwarg != "substrates" {
				t.Errorf("%s sends Substrate as %q", d.Key, ck.Kwarg)
			}
		}
	}
}

type noChem struct{}

func (noChem) Convert(_ context.Context, _ SubstrateForm, texts []string) ([]string, bool, error) {
	return texts, false, nil
}

// TestReferenceInputFiles writes the reference profile's input files and
// checks what a program reads: OmniESI's typed params and row keys in the
// JSON, KinForm's --model_config.
func TestReferenceInputFiles(t *testing.T) {
	c, err := Parse([]byte(`base: reference
methods:
  - key: OmniESI
    command: {python: /opt/omniesi/bin/python, script: /app/models/OmniESI/batch_predict.py, paths: {model_dir: /w, data_dir: /a}}
  - key: KinForm-L
    command: {python: /opt/kinform/bin/python, script: /app/models/KinForm/code/main.py}
`))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := c.Get("OmniESI")
	dir := t.TempDir()
	req := CommandRequest{JobID: "j1", Target: "Km", Dir: dir, Canonicalize: true,
		Rows: []EngineRow{{Seq: "MKT", Kwargs: map[string]string{"substrates": "CCO"}, SeqID: "s1"}}}
	run, err := writeEngineInput(context.Background(), d, req)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(run.in)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(run.in) != "OmniESI_input_j1.json" {
		t.Errorf("input file %s", run.in)
	}
	var in struct {
		Method string              `json:"method"`
		Rows   []map[string]string `json:"rows"`
		Params map[string]any      `json:"params"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatal(err)
	}
	// A JSON false, not the string "false" (which Python reads as true).
	if v, ok := in.Params["cleanup_embeddings_after_run"].(bool); !ok || v {
		t.Errorf("cleanup_embeddings_after_run %#v in %s", in.Params["cleanup_embeddings_after_run"], raw)
	}
	if in.Method != "OmniESI" || in.Params["kinetics_type"] != "KM" || in.Params["canonicalize_substrates"] != true ||
		len(in.Rows) != 1 || in.Rows[0]["substrates"] != "CCO" || in.Rows[0]["seq_id"] != "s1" || in.Rows[0]["sequence"] != "MKT" {
		t.Errorf("input %s", raw)
	}

	k, _ := c.Get("KinForm-L")
	req = CommandRequest{JobID: "j2", Target: "kcat", Dir: dir, Chem: noChem{},
		Rows: []EngineRow{{Seq: "MKT", Kwargs: map[string]string{"substrates": "CCO"}}}}
	run, err = writeEngineInput(context.Background(), k, req)
	if err != nil {
		t.Fatal(err)
	}
	argv := k.Command.Render(k.FileContract, commandVars(k, req, run))
	if got := strings.Join(argv, " "); !strings.Contains(got, " --task kcat --model_config KinForm-L ") ||
		!strings.HasPrefix(got, "/opt/kinform/bin/python /app/models/KinForm/code/main.py --mode predict") {
		t.Errorf("KinForm argv %s", got)
	}
	raw, _ = os.ReadFile(run.in)
	if !strings.Contains(string(raw), `"smiles":"CCO"`) {
		t.Errorf("KinForm input %s", raw)
	}
	// The built-in keeps the label form.
	b, _ := Default().Get("A-H")
	b = b.Clone()
	b.Command = &Command{Python: "p", Script: "s"}
	req.Target = "Km"
	run, err = writeEngineInput(context.Background(), b, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(b.Command.Render(b.FileContract, commandVars(b, req, run)), " "); !strings.Contains(got, "--task KM --model_config A-H ") {
		t.Errorf("built-in A-H argv %s", got)
	}
}

// TestReferenceOperatorFile: an operator of the reference deployment writes
// only the commands; rename and remove work on the reference keys.
func TestReferenceOperatorFile(t *testing.T) {
	c, err := Parse([]byte(`base: reference
remove: [MMISA-KM]
rename: {CatRange: CatRange-v2}
methods:
  - key: CataPro
    command:
      python: /opt/conda/envs/catapro_env/bin/python
      script: /app/models/CataPro/inference/custom_predict.py
      paths: {tools: /app/tools, model_dir: /app/models/CataPro}
  - key: CatRange-v2
    command: {python: /opt/conda/envs/catrange_env/bin/python, script: /app/models/CatRange/predict.py, paths: {model_dir: /app/models/CatRange, esmc_python: /opt/conda/envs/esmc/bin/python}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get("MMISA-KM"); ok {
		t.Error("MMISA-KM not removed")
	}
	if _, ok := c.Get("CatRange"); ok {
		t.Error("CatRange not renamed")
	}
	k, ok := c.Get("CatRange-v2")
	if !ok || k.Command == nil || k.Command.Paths["esmc_python"] == "" || k.DisplayName != "CatRange" {
		t.Fatalf("CatRange-v2 %+v", k)
	}
	b, _ := c.Get("CataPro")
	if b.Command == nil || b.Command.Paths["model_dir"] != "/app/models/CataPro" || b.Authors == "" || len(b.EnvPaths) != 3 {
		t.Errorf("CataPro %+v", b)
	}
	env, unset := commandEnv(b, nil, map[string]string{"media": "/app/media", "tools": "/app/tools", "model_dir": "/app/models/CataPro"})
	if !slices.Equal(env, []string{"CATAPRO_MEDIA_PATH=/app/media", "CATAPRO_TOOLS_PATH=/app/tools", "CATAPRO_MODEL_ROOT=/app/models/CataPro"}) || len(unset) != 0 {
		t.Errorf("CataPro env %v unset %v", env, unset)
	}
}

func TestParseBaseAndTypedValues(t *testing.T) {
	_, err := Parse([]byte("base: webkinpred\n"))
	if err == nil || !strings.Contains(err.Error(), "builtin") || !strings.Contains(err.Error(), "empty") || !strings.Contains(err.Error(), "reference") {
		t.Errorf("unknown base: %v", err)
	}
	// A boolean among target_kwargs would reach the program as "false".
	_, err = Parse([]byte("methods:\n  - key: G\n    target_kwargs: {kcat: {cleanup_embeddings_after_run: false}}\n"))
	if err == nil || !strings.Contains(err.Error(), "params") {
		t.Errorf("boolean target kwarg: %v", err)
	}
	_, err = Parse([]byte("methods:\n  - key: G\n    target_kwargs: {kcat: {top_k: 3}}\n"))
	if err == nil {
		t.Error("number target kwarg accepted")
	}
	c, err := Parse([]byte("methods:\n  - key: G\n    target_kwargs: {kcat: {mode: \"3\"}}\n    params: {kcat: {top_k: 3, strict: true, scale: 0.5}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := c.Get("G")
	if g.TargetKwargs[Kcat]["mode"] != "3" || g.Params[Kcat]["top_k"] != 3 || g.Params[Kcat]["strict"] != true || g.Params[Kcat]["scale"] != 0.5 {
		t.Errorf("G kwargs %v params %#v", g.TargetKwargs, g.Params)
	}
	if cl := g.Clone(); !reflect.DeepEqual(cl.Params, g.Params) {
		t.Errorf("clone params %v", cl.Params)
	} else {
		cl.Params[Kcat]["top_k"] = 4
		if g.Params[Kcat]["top_k"] != 3 {
			t.Error("Clone shares params")
		}
	}
	if _, err := Parse([]byte("methods:\n  - key: C\n    params: {kcat: {x: 1}}\n")); err == nil {
		t.Error("params on a CSV contract accepted")
	}
	if _, err := Parse([]byte("methods:\n  - key: G\n    params: {kcat/Km: {x: 1}}\n")); err == nil {
		t.Error("params for an unsupported target accepted")
	}
}

// TestCitation: a method of the reference profile says how to cite it from
// its descriptor; a built-in label's placeholders give no citation.
func TestCitation(t *testing.T) {
	c, err := Parse([]byte("base: reference\n"))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := c.Get("DLKcat")
	want := "Feiran Li, Le Yuan, Hongzhong Lu, Gang Li, Yu Chen, Martin K. M. Engqvist, Eduard J. Kerkhoven & Jens Nielsen. " +
		"Deep learning-based kcat prediction enables improved enzyme-constrained model reconstruction. " +
		"https://www.nature.com/articles/s41929-022-00798-z. Code: https://github.com/SysBioChalmers/DLKcat."
	if got := d.Citation(); got != want {
		t.Errorf("DLKcat's citation\n got %q\nwant %q", got, want)
	}
	for _, k := range c.Keys() {
		if d, _ := c.Get(k); d.Citation() == "" {
			t.Errorf("%s: no citation in the reference profile", k)
		}
	}
	if b, _ := Default().Get("B"); b.Citation() != "" {
		t.Errorf("built-in B's placeholder citation %q", b.Citation())
	}
}
