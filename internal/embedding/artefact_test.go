package embedding

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kinflow/kinflow/internal/methods"
)

func TestNPYRoundTripAndHeader(t *testing.T) {
	for _, shape := range [][]int{{5}, {3, 4}, {0, 1024}, {1}} {
		ten := Tensor{Shape: shape, Data: make([]float32, NumElements(shape))}
		for i := range ten.Data {
			ten.Data[i] = float32(i) - 0.5
		}
		b, err := EncodeNPY(ten)
		if err != nil {
			t.Fatal(err)
		}
		hlen := int(b[8]) | int(b[9])<<8
		if string(b[:8]) != "\x93NUMPY\x01\x00" || (10+hlen)%64 != 0 || b[10+hlen-1] != '\n' {
			t.Errorf("shape %v: bad preamble/padding %q", shape, b[:10+hlen])
		}
		if !bytes.Contains(b[:10+hlen], []byte("'descr': '<f4'")) {
			t.Errorf("dtype missing")
		}
		got, err := DecodeNPY(bytes.NewReader(b))
		if err != nil || !reflect.DeepEqual(got.Shape, shape) || !reflect.DeepEqual(got.Data, ten.Data) {
			t.Errorf("shape %v: round trip %v %v", shape, got.Shape, err)
		}
	}
	if _, err := EncodeNPY(Tensor{Shape: []int{3}, Data: []float32{1}}); err == nil {
		t.Error("shape/data mismatch accepted")
	}
	if _, err := DecodeNPY(strings.NewReader("not npy at all")); err == nil {
		t.Error("garbage decoded")
	}
}

func TestPTRoundTrip(t *testing.T) {
	for _, shape := range [][]int{{1280}, {7, 1280}, {2, 3, 4, 5}, {0, 1280}} {
		ten := Tensor{Shape: shape, Data: make([]float32, NumElements(shape))}
		for i := range ten.Data {
			ten.Data[i] = float32(math.Sin(float64(i)))
		}
		b, err := EncodePT(ten)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodePT(b)
		if err != nil || !reflect.DeepEqual(got.Shape, shape) || !reflect.DeepEqual(got.Data, ten.Data) {
			t.Fatalf("shape %v: round trip %v %v", shape, got.Shape, err)
		}
	}
	if _, err := DecodePT([]byte("PK garbage")); err == nil {
		t.Error("garbage decoded")
	}
}

func TestManifestFormat(t *testing.T) {
	dir := t.TempDir()
	// A manifest written by a reference worker, with a field kinflow does not know.
	ref := `{"count":1,"entries":{"aaa":{"bytes":10,"extra":"kept","filename":"aaa.npy","ready":true,"updated_at":1.5}},"updated_at":1.5,"version":1}`
	if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte(ref), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := MergeManifest(dir, []Commit{{SeqID: "bbb", Suffix: ".npy", Bytes: 4224, Synthetic: true}, {SeqID: "ccc", Suffix: ".npy", Bytes: 1}}, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, ManifestName))
	s := string(b)
	if strings.ContainsAny(s, " \n") {
		t.Errorf("manifest not compact: %s", s)
	}
	if !strings.HasPrefix(s, `{"count":3,"entries":{"aaa":{"bytes":10,"extra":"kept","filename":"aaa.npy","ready":true,"updated_at":1.5},"bbb":{"bytes":4224,"filename":"bbb.npy","ready":true,"synthetic":true,"updated_at":`) {
		t.Errorf("manifest %s", s)
	}
	if !strings.HasSuffix(s, `,"version":1}`) || !strings.Contains(s, `},"updated_at":`) {
		t.Errorf("manifest tail %s", s)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if ReadManifest(dir)["bbb"].Synthetic != true || ReadManifest(dir)["ccc"].Synthetic {
		t.Error("synthetic flags")
	}
	// Concurrent merges lose nothing.
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				if err := MergeManifest(dir, []Commit{{SeqID: fmt.Sprintf("g%d_%d", g, i), Suffix: ".npy", Bytes: 1}}, nil); err != nil {
					t.Error(err)
				}
			}
		}(g)
	}
	wg.Wait()
	if n := len(ReadManifest(dir)); n != 83 {
		t.Errorf("after concurrent merges: %d entries, want 83", n)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".manifest.") && strings.HasSuffix(e.Name(), ".json") {
			t.Errorf("temp manifest left: %s", e.Name())
		}
	}
}

func TestComputeStepIdempotentResumableSynthetic(t *testing.T) {
	l := newLayout(t)
	ids, m := testSeqs(6)
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	n, err := ComputeStep(ctx, l, methods.StepMethodAESM2Layers, ids, m, func(string) {
		calls++
		if calls == 5 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || n != 5 {
		t.Fatalf("cancelled step: %d %v", n, err)
	}
	fam, _ := FamilyByName(FamilyESM2Layer26Mean)
	if !ReadManifest(l.FamilyDir(fam))[ids[0]].Synthetic {
		t.Error("written before the cancel but not in the manifest as synthetic")
	}
	n, err = ComputeStep(context.Background(), l, methods.StepMethodAESM2Layers, ids, m, nil)
	if err != nil || n != 6*4-5 {
		t.Fatalf("resume wrote %d, %v", n, err)
	}
	if n, err := ComputeStep(context.Background(), l, methods.StepMethodAESM2Layers, ids, m, nil); err != nil || n != 0 {
		t.Fatalf("rerun wrote %d, %v", n, err)
	}
	// Deterministic in the sequence, with the real shape.
	p, _ := l.Path(fam, ids[2])
	b, _ := os.ReadFile(p)
	ten, err := DecodeNPY(bytes.NewReader(b))
	if err != nil || !reflect.DeepEqual(ten.Shape, []int{1280}) || !reflect.DeepEqual(ten.Data, SyntheticArtefact(fam, m[ids[2]]).Data) {
		t.Errorf("artefact %v %v", ten.Shape, err)
	}
	if e := ReadManifest(l.FamilyDir(fam))[ids[2]]; !e.Ready || !e.Synthetic || e.Filename != ids[2]+".npy" || e.Bytes != int64(len(b)) {
		t.Errorf("manifest entry %+v", e)
	}
	ents, _ := os.ReadDir(l.FamilyDir(fam))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "."+ids[0]) {
			t.Errorf("temp file left: %s", e.Name())
		}
	}
}

func TestFamiliesAndShapes(t *testing.T) {
	dims := map[string]int{FamilyProtT5LastMean: 1024, FamilyESM2Layer26Weighted: 1280, FamilyESMCLayer24Mean: 1152,
		FamilyESM1bMethodD: 1280, FamilyESM1v: 1280, FamilyMethodGESM2: 1280, FamilyESM2LayerLastMean: 1280, FamilyMethodIProtT5Residues: 1024,
		FamilyMethodKESMC: 1152}
	for name, dim := range dims {
		f, ok := FamilyByName(name)
		if !ok || f.Dim != dim {
			t.Errorf("%s dim %d", name, f.Dim)
		}
	}
	ephemeral := map[string]bool{FamilyESM1v: true, FamilyMethodGESM2: true, FamilyMethodIProtT5Residues: true}
	for _, f := range Families() {
		if f.Persistent == ephemeral[f.Name] {
			t.Errorf("%s persistent=%v", f.Name, f.Persistent)
		}
	}
	if len(Families()) != 18 {
		t.Errorf("%d families", len(Families()))
	}
	seq := strings.Repeat("A", 1500)
	check := func(name string, want []int) {
		f, _ := FamilyByName(name)
		if got := SyntheticArtefact(f, seq).Shape; !reflect.DeepEqual(got, want) {
			t.Errorf("%s shape %v, want %v", name, got, want)
		}
	}
	check(FamilyESM1v, []int{1000, 1280})
	check(FamilyMethodGESM2, []int{1023, 1280})
	check(FamilyMethodIProtT5Residues, []int{1500, 1024})
	check(FamilyESMCLayer32Mean, []int{1152})
	if a, b := SyntheticArtefact(Family{Name: "x", Dim: 4}, "MKT"), SyntheticArtefact(Family{Name: "x", Dim: 4}, "MKA"); reflect.DeepEqual(a.Data, b.Data) {
		t.Error("synthetic artefacts ignore the sequence")
	}
	l, _ := NewLayout("/m", "", "", "")
	if l.MethodJCacheDir != "/m/sequence_info/methodj_contacts" || l.BindingSiteTable() != "/m/pseq2sites/binding_sites_all.tsv" {
		t.Errorf("layout %+v", l)
	}
}

func TestBindingSiteTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bs", BindingSiteTableName)
	got, err := AppendBindingSites(path, []BindingSiteRow{{SeqID: "a", Scores: []float32{0.5, 0.1234567}}, {SeqID: "b", Scores: []float32{1}}, {SeqID: "a"}})
	if err != nil || !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("append: %v %v", got, err)
	}
	b, _ := os.ReadFile(path)
	if string(b) != "PDB\tPred_BS_Scores\na\t0.500000,0.123457\nb\t1.000000\n" {
		t.Fatalf("table %q", b)
	}
	// A torn line (a writer died mid-line) is invisible to readers and cut
	// by the next writer.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	_, _ = f.WriteString("c\t0.1,0.")
	_ = f.Close()
	ids, _ := BindingSiteIDs(path)
	if _, ok := ids["c"]; ok || len(ids) != 2 {
		t.Fatalf("reader saw a half line: %v", ids)
	}
	if _, err := AppendBindingSites(path, []BindingSiteRow{{SeqID: "d", Scores: []float32{0.25}}}); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if !strings.HasSuffix(string(b), "b\t1.000000\nd\t0.250000\n") {
		t.Fatalf("after repair %q", b)
	}
	// A table with a labelled middle column, and one without header.
	other := filepath.Join(t.TempDir(), "t.tsv")
	_ = os.WriteFile(other, []byte("PDB\tBS\tPred_BS_Scores\nx\t1,0\t0.5,0.5\n"), 0o644)
	if ids, _ := BindingSiteIDs(other); len(ids) != 1 {
		t.Errorf("labelled variant %v", ids)
	}
	_ = os.WriteFile(other, []byte("y\t0.1\nz\t0.2\n"), 0o644)
	if ids, _ := BindingSiteIDs(other); len(ids) != 2 {
		t.Errorf("headerless %v", ids)
	}
}

// TestBindingSiteAppendAcrossProcesses runs writers in goroutines and in
// separate processes at once: every id ends up exactly once, on whole lines.
func TestBindingSiteAppendAcrossProcesses(t *testing.T) {
	if os.Getenv("KINFLOW_BS_HELPER") != "" {
		return
	}
	path := filepath.Join(t.TempDir(), BindingSiteTableName)
	rows := func(from, to int) []BindingSiteRow {
		var out []BindingSiteRow
		for i := from; i < to; i++ {
			out = append(out, BindingSiteRow{SeqID: "s" + strconv.Itoa(i), Scores: SyntheticBindingSites(strings.Repeat("MKT", 200+i%50))})
		}
		return out
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for p := 0; p < 3; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBindingSiteHelperProcess$")
			cmd.Env = append(os.Environ(), "KINFLOW_BS_HELPER="+path, "KINFLOW_BS_FROM="+strconv.Itoa(p*40))
			if out, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("helper %d: %v\n%s", p, err, out)
			}
		}(p)
	}
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				if _, err := AppendBindingSites(path, rows(g*25+i*5, g*25+i*5+10)); err != nil {
					errs <- err
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if lines[0] != BindingSiteHeader {
		t.Fatalf("header %q", lines[0])
	}
	seen := map[string]bool{}
	for _, ln := range lines[1:] {
		id, scores, ok := strings.Cut(ln, "\t")
		if !ok || seen[id] || strings.Count(scores, ",")+1 < 600 {
			t.Fatalf("bad or duplicate line for %q (ok=%v)", id, ok)
		}
		seen[id] = true
	}
	if len(seen) != 130 {
		t.Errorf("%d ids, want 130 (s0..s129)", len(seen))
	}
}

func TestBindingSiteHelperProcess(t *testing.T) {
	path := os.Getenv("KINFLOW_BS_HELPER")
	if path == "" {
		t.Skip("helper process for TestBindingSiteAppendAcrossProcesses")
	}
	from, _ := strconv.Atoi(os.Getenv("KINFLOW_BS_FROM"))
	for i := 0; i < 40; i += 4 {
		var rows []BindingSiteRow
		for j := from + i; j < from+i+8; j++ {
			rows = append(rows, BindingSiteRow{SeqID: "s" + strconv.Itoa(j), Scores: SyntheticBindingSites(strings.Repeat("MKT", 200+j%50))})
		}
		if _, err := AppendBindingSites(path, rows); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMergeManifestKeepsWhatItDoesNotChange: a merge decodes only the
// entries it changes; every other value (other writers' keys, entries of any
// shape, keys with escapes, pretty-printed input) comes back as it was, and
// a document that is not valid JSON is started afresh.
func TestMergeManifestKeepsWhatItDoesNotChange(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ManifestName)
	in := `{
  "count": 4,
  "entries": {
    "aaa": {"bytes": 10, "extra": ["kept", 1.50], "filename": "aaa.npy", "ready": true},
    "bad": 5,
    "ccc": {"bytes": 1, "filename": "ccc.npy", "keep": {"x": null}, "ready": false, "sha256": "00"},
    "q\"\u00e9": {"bytes": 2}
  },
  "updated_at": 1.5,
  "version": 1,
  "writer": "python <3>"
}
`
	if err := os.WriteFile(path, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := MergeManifest(dir, []Commit{{SeqID: "ccc", Suffix: ".npy", Bytes: 4224}, {SeqID: "ddd", Suffix: ".npy", Bytes: 7, Synthetic: true}}, []string{"zzz"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	var got map[string]any
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("merged manifest is not JSON: %v\n%s", err, b)
	}
	entries := got["entries"].(map[string]any)
	if got["count"] != json.Number("5") || len(entries) != 5 || got["writer"] != "python <3>" || got["version"] != json.Number("1") {
		t.Errorf("top level: %s", b)
	}
	if !strings.Contains(string(b), `"aaa": {"bytes": 10, "extra": ["kept", 1.50], "filename": "aaa.npy", "ready": true}`) &&
		!strings.Contains(string(b), `"aaa":{"bytes": 10, "extra": ["kept", 1.50], "filename": "aaa.npy", "ready": true}`) {
		t.Errorf("an unchanged entry was rewritten: %s", b)
	}
	if entries["bad"] != json.Number("5") || entries["q\"é"] == nil {
		t.Errorf("odd entries: %s", b)
	}
	ccc := entries["ccc"].(map[string]any)
	if ccc["bytes"] != json.Number("4224") || ccc["ready"] != true || ccc["keep"] == nil || ccc["sha256"] != nil {
		t.Errorf("changed entry ccc: %v", ccc)
	}
	if ddd := entries["ddd"].(map[string]any); ddd["synthetic"] != true || ddd["filename"] != "ddd.npy" {
		t.Errorf("new entry ddd: %v", ddd)
	}
	// Keys come out sorted, as encoding/json writes a map.
	if i, j := strings.Index(string(b), `"ccc"`), strings.Index(string(b), `"ddd"`); i < 0 || j < i {
		t.Errorf("entries not sorted: %s", b)
	}

	for _, bad := range []string{`{"entries": {"aaa": {}`, `{"entries": {}} trailing`, `[1, 2]`, `{"entries": "no"}`, ``} {
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := MergeManifest(dir, []Commit{{SeqID: "eee", Suffix: ".npy", Bytes: 1}}, nil); err != nil {
			t.Fatal(err)
		}
		if m := ReadManifest(dir); len(m) != 1 || !m["eee"].Ready {
			b, _ := os.ReadFile(path)
			t.Errorf("after %q: %s", bad, b)
		}
	}
}

// FuzzMergeManifest: whatever the manifest holds, a merge writes valid JSON
// whose entries list the merged file (ReadManifest, stricter, may still
// refuse what other writers put beside it).
func FuzzMergeManifest(f *testing.F) {
	f.Add([]byte(`{"count":1,"entries":{"aaa":{"bytes":10,"filename":"aaa.npy","ready":true}},"updated_at":1.5,"version":1}`))
	f.Add([]byte(`{"entries":{"a\u0000b":[],"x":{"y":"\"}"}},"z":{"entries":1}}`))
	f.Add([]byte(`{"entries":5}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ManifestName), doc, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := MergeManifest(dir, []Commit{{SeqID: "fff", Suffix: ".npy", Bytes: 3}}, nil); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, ManifestName))
		if err != nil || !json.Valid(b) {
			t.Fatalf("merged manifest is not JSON: %v\n%s", err, b)
		}
		var got struct {
			Entries map[string]json.RawMessage `json:"entries"`
		}
		var fff struct {
			Ready bool `json:"ready"`
		}
		if json.Unmarshal(b, &got) != nil || json.Unmarshal(got.Entries["fff"], &fff) != nil || !fff.Ready {
			t.Fatalf("merged file not listed: %s", b)
		}
	})
}
