package methods

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestDefaultCatalogueMatchesWire(t *testing.T) {
	c := Default()
	if got, want := c.Keys(), []string{"A-H", "A-L", "B", "C", "D", "E", "F", "G", "G-O2", "H", "I", "J", "K", "L"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("registry order = %v, want %v", got, want)
	}
	type row struct {
		supports []Target
		format   string
		maxLen   int
		required []string
		engine   EngineKind
		profile  string
		gpu      bool
		cols     map[Target]string
	}
	single := []string{"Protein Sequence", "Substrate"}
	kk := map[Target]string{Kcat: "kcat (1/s)", Km: "KM (mM)"}
	want := map[string]row{
		"A-H": {[]Target{Kcat, Km}, "single", 1500, single, EngineDedicated, "methoda_full", true, kk},
		"A-L": {[]Target{Kcat}, "single", 1500, single, EngineDedicated, "methoda_full", true, map[Target]string{Kcat: "kcat (1/s)"}},
		"B": {[]Target{Kcat, Km, KcatKm}, "single", 1000, single, EngineGeneric, "prot_t5_mean", true,
			map[Target]string{Kcat: "kcat (1/s)", Km: "KM (mM)", KcatKm: "kcat/Km (1/(s*mM))"}},
		"C": {[]Target{Kcat, Km}, "single", 1000, single, EngineDedicated, "prot_t5_mean", true, kk},
		"D": {[]Target{Kcat}, "multi", 1024, []string{"Protein Sequence", "Substrates", "Products"}, EngineDedicated, "methodd_esm1b", true,
			map[Target]string{Kcat: "kcat (1/s)"}},
		"E":    {[]Target{Kcat, Km}, "single", 2048, single, EngineGeneric, "methode_embed", true, kk},
		"F":    {[]Target{Kcat, Km}, "single", 1024, single, EngineBatchScript, "methodf_esm1v", true, kk},
		"G":    {[]Target{Kcat, Km}, "single", 1000, single, EngineGeneric, "methodg_esm2", true, kk},
		"G-O2": {[]Target{Kcat, Km}, "single", 1000, single, EngineGeneric, "methodg_esm2", true, kk},
		"H":    {[]Target{Kcat, Km}, "single", 1022, single, EngineGeneric, "methodh_esm2_last_mean", true, kk},
		"I": {[]Target{KcatKm}, "single", 1000, single, EngineGeneric, "methodi_prot_t5_residues", true,
			map[Target]string{KcatKm: "kcat/Km (1/(s*mM))"}},
		"J": {[]Target{Km}, "single", 500, single, EngineGeneric, "", false, map[Target]string{Km: "KM (mM)"}},
		"K": {[]Target{Kcat, Km}, "single", 1024, single, EngineGeneric, "methodk_esmc_mean", true,
			map[Target]string{Kcat: "Predicted kcat range: kcat (1/s)", Km: "Predicted KM range: kM (M)"}},
		"L": {[]Target{Kcat}, "single", 0, single, EngineDedicated, "", false, map[Target]string{Kcat: "kcat (1/s)"}},
	}
	for key, w := range want {
		d, ok := c.Get(key)
		if !ok {
			t.Fatalf("method %s missing", key)
		}
		got := row{d.Supports, d.InputFormat, d.MaxSeqLen, d.RequiredColumns(), d.Engine, d.Profile, d.GPUEligible, d.OutputCols}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("method %s:\n got %+v\nwant %+v", key, got, w)
		}
		if d.DisplayName != "Method "+key {
			t.Errorf("method %s display name %q", key, d.DisplayName)
		}
		if d.Authors == "" || d.PublicationTitle == "" {
			t.Errorf("method %s: empty bibliographic placeholders", key)
		}
	}
	if _, ok := c.Get("a-h"); ok {
		t.Error("keys must be case-sensitive")
	}
	if d, _ := c.Get("A-L"); d.TargetKwargs[Kcat]["model_variant"] != "L" || d.TargetKwargs[Kcat]["kinetics_type"] != "KCAT" {
		t.Errorf("A-L target kwargs %v", d.TargetKwargs)
	}
	if d, _ := c.Get("B"); d.TargetKwargs[KcatKm]["kinetics_type"] != "KCAT/KM" {
		t.Errorf("B target kwargs %v", d.TargetKwargs)
	}
	for _, k := range []string{"D", "I"} {
		if d, _ := c.Get(k); len(d.TargetKwargs) != 0 {
			t.Errorf("%s has target kwargs %v", k, d.TargetKwargs)
		}
	}
	if d, _ := c.Get("F"); !reflect.DeepEqual(d.EphemeralFamilies, []string{"esm1v"}) {
		t.Errorf("F ephemeral %v", d.EphemeralFamilies)
	}
}

func TestValidKeysPerTarget(t *testing.T) {
	c := Default()
	cases := map[Target][]string{
		Kcat:   {"A-H", "A-L", "B", "C", "D", "E", "F", "G", "G-O2", "H", "K", "L"},
		Km:     {"A-H", "B", "C", "E", "F", "G", "G-O2", "H", "J", "K"},
		KcatKm: {"B", "I"},
	}
	for tg, want := range cases {
		if got := c.ValidKeys(tg); !reflect.DeepEqual(got, want) {
			t.Errorf("ValidKeys(%s) = %v, want %v", tg, got, want)
		}
		var got []string
		for _, d := range c.ForTarget(tg) {
			got = append(got, d.Key)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ForTarget(%s) = %v", tg, got)
		}
	}
	if got := c.ValidKeys("nope"); got != nil {
		t.Errorf("unknown target: %v", got)
	}
	if cols, ok := c.RequiredColumns("D"); !ok || !reflect.DeepEqual(cols, []string{"Protein Sequence", "Substrates", "Products"}) {
		t.Errorf("RequiredColumns(D) = %v %v", cols, ok)
	}
	if _, ok := c.RequiredColumns("Z"); ok {
		t.Error("RequiredColumns of an unknown key")
	}
	if got := Targets(); !reflect.DeepEqual(got, []Target{"kcat", "Km", "kcat/Km"}) {
		t.Errorf("Targets = %v", got)
	}
}

func TestStepKeys(t *testing.T) {
	want := []string{"methoda_t5_full", "methoda_esm2_layers", "methoda_esmc_layers", "prot_t5_mean", "methodd_esm1b",
		"methodf_esm1v", "methode_embed_kcat", "methode_embed_km", "methodg_esm2", "methodh_esm2_last_mean", "methodi_prot_t5_residues",
		"methodk_esmc_mean"}
	if got := ActiveSteps(); !reflect.DeepEqual(got, want) {
		t.Fatalf("ActiveSteps = %v", got)
	}
	for _, k := range want {
		if c, ok := CanonicalStep(k); !ok || c != k {
			t.Errorf("CanonicalStep(%s) = %q %v", k, c, ok)
		}
	}
	for _, k := range []string{"methoda_bindsites", "methoda_prott5_layers"} {
		if c, ok := CanonicalStep(k); !ok || c != "methoda_t5_full" {
			t.Errorf("CanonicalStep(%s) = %q %v", k, c, ok)
		}
		if IsActiveStep(k) {
			t.Errorf("%s must not be active", k)
		}
	}
	for _, k := range []string{"", "METHODA_T5_FULL", "methoda_t5_full ", "../x", "methoda"} {
		if _, ok := CanonicalStep(k); ok {
			t.Errorf("CanonicalStep(%q) accepted", k)
		}
	}
	c := Default()
	e, _ := c.Get("E")
	if got := e.StepKeysFor(Km); !reflect.DeepEqual(got, []string{"methode_embed_km"}) {
		t.Errorf("E Km steps %v", got)
	}
	if got := e.StepKeysFor(KcatKm); got != nil {
		t.Errorf("E kcat/Km steps %v", got)
	}
	a, _ := c.Get("A-H")
	if got := a.StepKeysFor(Kcat); len(got) != 3 {
		t.Errorf("A steps %v", got)
	}
	j, _ := c.Get("J")
	if got := j.StepKeysFor(Km); got != nil {
		t.Errorf("J steps %v", got)
	}
}

func TestOperatorFileYAML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "methods.yaml")
	body := `
remove: [J]
rename:
  A-H: A-high
methods:
  - key: B
    command:
      python: /opt/b/bin/python
      script: /opt/b/predict.py
      extra_args: [--fast]
  - key: M
    display_name: Method M
    supports: [Km]
    output_cols: {Km: "KM (mM)"}
    max_seq_len: 0
    col_to_kwarg: [{column: Substrate, kwarg: smiles}]
    profile: prot_t5_mean
    gpu_eligible: true
    step_keys: [prot_t5_mean]
    command: {argv: ["/opt/k/run", "{input}", "{output}", "{target}"]}
`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Keys(), []string{"A-L", "A-high", "B", "C", "D", "E", "F", "G", "G-O2", "H", "I", "K", "L", "M"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
	b, _ := c.Get("B")
	if b.DisplayName != "Method B" || b.MaxSeqLen != 1000 {
		t.Errorf("override lost other fields: %+v", b)
	}
	argv := b.Command.Render(b.FileContract, map[string]string{"input": "in.json", "output": "out.json"})
	if want := []string{"/opt/b/bin/python", "/opt/b/predict.py", "--fast", "--input", "in.json", "--output", "out.json"}; !reflect.DeepEqual(argv, want) {
		t.Errorf("B argv %v", argv)
	}
	if def, _ := Default().Get("B"); def.Command != nil {
		t.Error("operator file changed the built-in catalogue")
	}
	k, _ := c.Get("M")
	if k.InputFormat != "single" || k.Engine != EngineGeneric || k.MaxSeqLen != 0 {
		t.Errorf("M defaults %+v", k)
	}
	if got := k.Command.Render(k.FileContract, map[string]string{"input": "i", "output": "o", "target": "Km"}); !reflect.DeepEqual(got, []string{"/opt/k/run", "i", "o", "Km"}) {
		t.Errorf("M argv %v", got)
	}
	if got := c.ValidKeys(Km); !reflect.DeepEqual(got, []string{"A-high", "B", "C", "E", "F", "G", "G-O2", "H", "K", "M"}) {
		t.Errorf("Km keys %v", got)
	}
}

func TestFileContracts(t *testing.T) {
	c := Default()
	want := map[string]FileContract{"A-H": ContractMethodA, "A-L": ContractMethodA, "C": ContractSubstrateCSV,
		"F": ContractSubstrateCSV, "D": ContractReactionCSV, "L": ContractSubstrateTSV}
	for _, d := range c.All() {
		if got := d.FileContract.OrJSON(); got != want[d.Key].OrJSON() {
			t.Errorf("%s: contract %q", d.Key, got)
		}
	}
	cmd := &Command{Python: "py", Script: "s.py", ExtraArgs: []string{"-q"}, Paths: map[string]string{"model_dir": "/m"}}
	vars := map[string]string{"input": "in", "output": "out", "kinetics_type": "KM", "task": "KM", "model_config": "A-H"}
	for contract, argv := range map[FileContract]string{
		"":                   "py s.py -q --input in --output out",
		ContractJSON:         "py s.py -q --input in --output out",
		ContractSubstrateCSV: "py s.py -q in out KM",
		ContractReactionCSV:  "py s.py -q in out",
		ContractMethodA:      "py s.py -q --mode predict --task KM --model_config A-H --save_results out --data_path in",
		ContractSubstrateTSV: "py s.py -q in out",
	} {
		if got := strings.Join(cmd.Render(contract, vars), " "); got != argv {
			t.Errorf("%q: argv %q, want %q", contract, got, argv)
		}
	}
	cmd.Argv = []string{"{python}", "{script}", "--model", "{model_dir}", "{input}"}
	if got := strings.Join(cmd.Render(ContractMethodA, vars), " "); got != "py s.py --model /m in" {
		t.Errorf("explicit argv %q", got)
	}
	d := &Descriptor{Command: cmd}
	d.Clone().Command.Paths["model_dir"] = "/x"
	if cmd.Paths["model_dir"] != "/m" {
		t.Error("Clone shares command.paths")
	}
}

func TestOperatorFileJSONAndErrors(t *testing.T) {
	c, err := Parse([]byte(`{"base": "empty", "methods": [{"key": "X", "display_name": "X", "supports": ["kcat"],
		"output_cols": {"kcat": "kcat (1/s)"}, "input_format": "single", "engine": "dedicated", "profile": "methodd_esm1b",
		"col_to_kwarg": [{"column": "Substrates", "kwarg": "s"}, {"column": "Products", "kwarg": "p"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Keys(); !reflect.DeepEqual(got, []string{"X"}) {
		t.Fatalf("keys %v", got)
	}
	if cols, _ := c.RequiredColumns("X"); !reflect.DeepEqual(cols, []string{"Protein Sequence", "Substrates", "Products"}) {
		t.Errorf("cols %v", cols)
	}
	if c, err := Parse(nil); err != nil || len(c.Keys()) != 14 {
		t.Errorf("empty file: %v", err)
	}
	bad := map[string]string{
		"duplicate in file":  `{"methods": [{"key": "B", "max_seq_len": 5}, {"key": "B"}]}`,
		"rename collides":    `{"rename": {"A-H": "B"}}`,
		"rename two to one":  `{"rename": {"A-H": "Z", "A-L": "Z"}}`,
		"remove unknown":     `{"remove": ["Q"]}`,
		"rename unknown":     `{"rename": {"Q": "R"}}`,
		"unknown field":      `{"methods": [{"key": "B", "max_len": 5}]}`,
		"unknown top":        `{"method": []}`,
		"bad target":         `{"methods": [{"key": "B", "supports": ["kcat", "Vmax"]}]}`,
		"missing output col": `{"methods": [{"key": "N", "display_name": "N", "supports": ["kcat"]}]}`,
		"bad engine":         `{"methods": [{"key": "B", "engine": "magic"}]}`,
		"bad profile":        `{"methods": [{"key": "B", "profile": "nope"}]}`,
		"bad step":           `{"methods": [{"key": "B", "step_keys": ["methoda_bindsites"]}]}`,
		"J on gpu":           `{"methods": [{"key": "J", "gpu_eligible": true}]}`,
		"bad base":           `{"base": "other"}`,
		"no key":             `{"methods": [{"display_name": "x"}]}`,
		"not yaml":           "methods: [\n",
		"bad contract":       `{"methods": [{"key": "B", "file_contract": "xml"}]}`,
		"reaction on single": `{"methods": [{"key": "C", "file_contract": "reaction_csv"}]}`,
		"bad path key":       `{"methods": [{"key": "B", "command": {"script": "b.py", "paths": {"model": "/m"}}}]}`,
	}
	for name, body := range bad {
		if _, err := Parse([]byte(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := New([]*Descriptor{Default().All()[0], Default().All()[0]}); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Errorf("New with duplicates: %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestInputBehaviorsAndGO2(t *testing.T) {
	c := Default()
	e, _ := c.Get("E")
	d, _ := c.Get("D")
	b, _ := c.Get("B")
	if e.InputBehavior(Kcat) != BehaviorNativeMulti || e.InputBehavior(Km) != BehaviorExpandedPair ||
		d.InputBehavior(Kcat) != BehaviorNativeFullReaction || b.InputBehavior(KcatKm) != BehaviorExpandedPair {
		t.Fatal("input behaviours")
	}
	if !reflect.DeepEqual(d.AcceptedCSVTypes(Kcat), []string{CSVFullReaction}) || len(b.AcceptedCSVTypes(Km)) != 3 {
		t.Fatal("accepted CSV types")
	}
	g, _ := c.Get("G")
	o2, ok := c.Get("G-O2")
	if !ok || o2.DisplayName != "Method G-O2" || o2.Profile != g.Profile || !reflect.DeepEqual(o2.StepKeys, g.StepKeys) ||
		!reflect.DeepEqual(o2.EphemeralFamilies, g.EphemeralFamilies) || o2.TargetKwargs[Km]["variant"] != "o2denet" ||
		o2.TargetKwargs[Kcat]["kinetics_type"] != "KCAT" || g.TargetKwargs[Kcat]["variant"] != "" {
		t.Fatalf("G-O2 %+v", o2)
	}
	bad := &Descriptor{Key: "X", DisplayName: "X", Supports: []Target{Kcat}, OutputCols: map[Target]string{Kcat: "k"},
		InputFormat: InputSingle, Engine: EngineGeneric, InputBehaviors: map[Target]string{Km: BehaviorNativeMulti}}
	if bad.Validate() == nil {
		t.Fatal("behaviour for an unsupported target accepted")
	}
	bad.InputBehaviors = map[Target]string{Kcat: "whole"}
	if bad.Validate() == nil {
		t.Fatal("unknown behaviour accepted")
	}
}
