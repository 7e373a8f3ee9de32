package embedding

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/methods"
)

// hCache writes method H's file (a persistent [1280] family) for three
// sequences with the synthetic writer and returns the layout, ids and map.
func hCache(t *testing.T) (*Layout, []string, map[string]string) {
	t.Helper()
	l := newLayout(t)
	seqs := map[string]string{}
	var ids []string
	for _, s := range []string{"MKTAYIAKQR", "MSTNPKPQRK", "MGSSHHHHHH"} {
		sid := BaseSeqID(s)
		ids = append(ids, sid)
		seqs[sid] = s
	}
	if _, err := ComputeStep(context.Background(), l, methods.StepMethodHESM2LastMean, ids, seqs, nil); err != nil {
		t.Fatal(err)
	}
	return l, ids, seqs
}

func planH(t *testing.T, l *Layout, ids []string, seqs map[string]string) *Plan {
	t.Helper()
	p, err := l.BuildPlan(context.Background(), PlanRequest{MethodKey: "H", Target: methods.Kcat,
		Profile: methods.ProfileMethodHESM2LastMean, SeqIDs: ids, SeqIDToSeq: seqs, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func hPath(t *testing.T, l *Layout, sid string) string {
	f, _ := FamilyByName(FamilyESM2LayerLastMean)
	p, err := l.Path(f, sid)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWritersRecordIntegrity: the synthetic writer records each file's
// size, time and hash before the file appears, and an untouched cache is
// checked with a stat alone.
func TestWritersRecordIntegrity(t *testing.T) {
	l, ids, seqs := hCache(t)
	f, _ := FamilyByName(FamilyESM2LayerLastMean)
	recs := ReadFileRecords(l.FamilyDir(f))
	for _, sid := range ids {
		r := recs[sid]
		info, err := os.Stat(hPath(t, l, sid))
		if err != nil || !r.Hashed() || !r.Synthetic || r.Bytes != info.Size() || r.MtimeNs != info.ModTime().UnixNano() {
			t.Fatalf("%s: record %+v, stat %v %v", sid, r, info, err)
		}
	}
	p := planH(t, l, ids, seqs)
	if !p.Complete() || p.Integrity == nil || p.Integrity.Checked != 3 || p.Integrity.Hashed != 0 || len(p.Integrity.Bad) != 0 {
		t.Fatalf("clean cache: %+v %+v", p, p.Integrity)
	}
}

// TestIntegrityFindsOverwriteAndTruncation is the scenario: a file
// overwritten with other numbers of the same shape and a truncated file are
// both found before use, set aside (not deleted) with a reason, counted as
// missing, and the intact file stays cached.
func TestIntegrityFindsOverwriteAndTruncation(t *testing.T) {
	l, ids, seqs := hCache(t)
	f, _ := FamilyByName(FamilyESM2LayerLastMean)
	other := Tensor{Shape: []int{1280}, Data: make([]float32, 1280)}
	for i := range other.Data {
		other.Data[i] = -3
	}
	b, _ := EncodeNPY(other)
	if err := os.WriteFile(hPath(t, l, ids[0]), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(hPath(t, l, ids[1]), 2112); err != nil {
		t.Fatal(err)
	}
	p := planH(t, l, ids, seqs)
	if p.NeedComputation != 2 || p.CachedAlready != 1 || len(p.StepPlans[0].MissingSeqIDs) != 2 {
		t.Fatalf("plan: need %d cached %d work %v", p.NeedComputation, p.CachedAlready, p.StepPlans[0].MissingSeqIDs)
	}
	bad := map[string]BadFile{}
	for _, bf := range p.Integrity.Bad {
		bad[bf.SeqID] = bf
	}
	if !strings.Contains(bad[ids[0]].Reason, "SHA-256") || !strings.Contains(bad[ids[1]].Reason, "2112 bytes") {
		t.Fatalf("bad files: %+v", p.Integrity.Bad)
	}
	for _, sid := range ids[:2] {
		if _, err := os.Stat(hPath(t, l, sid)); !os.IsNotExist(err) {
			t.Errorf("%s: still in the family folder", sid)
		}
		q := filepath.Join(l.SequenceInfo(), filepath.FromSlash(bad[sid].Quarantined))
		if _, err := os.Stat(q); err != nil {
			t.Errorf("%s: not set aside: %v", sid, err)
		}
		if r, _ := os.ReadFile(q + QuarantineReasonSuffix); !strings.Contains(string(r), bad[sid].Reason) {
			t.Errorf("%s: reason file %q", sid, r)
		}
		if _, listed := ReadFileRecords(l.FamilyDir(f))[sid]; listed {
			t.Errorf("%s: still listed", sid)
		}
	}
	if q, _ := l.Quarantined(f); len(q) != 2 || QuarantinedSeqID(f, q[0]) == "" {
		t.Fatalf("quarantined %v", q)
	}
	// The writer recomputes them; then the cache is whole again.
	if n, err := ComputeStep(context.Background(), l, methods.StepMethodHESM2LastMean, ids, seqs, nil); err != nil || n != 2 {
		t.Fatalf("recompute: %d %v", n, err)
	}
	if p := planH(t, l, ids, seqs); !p.Complete() || len(p.Integrity.Bad) != 0 || p.Integrity.Hashed != 0 {
		t.Fatalf("after recompute: %+v", p.Integrity)
	}
}

// TestIntegrityUnrecordedFiles: a file without a recorded hash (a
// reference deployment's) is checked for shape and finite values on first
// use and recorded; a bad one is set aside; a touched but unchanged file is
// hashed once and its new time recorded.
func TestIntegrityUnrecordedFiles(t *testing.T) {
	l := newLayout(t)
	f, _ := FamilyByName(FamilyESM2LayerLastMean)
	seqs := map[string]string{}
	var ids []string
	for _, s := range []string{"MKTAYIAKQR", "MSTNPKPQRK", "MGSSHHHHHH", "MAAAAAAAAA"} {
		ids = append(ids, BaseSeqID(s))
		seqs[BaseSeqID(s)] = s
	}
	if err := os.MkdirAll(l.FamilyDir(f), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(sid string, tn Tensor) {
		b, err := EncodeNPY(tn)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(hPath(t, l, sid), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	good := Tensor{Shape: []int{1280}, Data: make([]float32, 1280)}
	nan := Tensor{Shape: []int{1280}, Data: make([]float32, 1280)}
	nan.Data[7] = float32(math.NaN())
	write(ids[0], good)
	write(ids[1], nan)
	write(ids[2], Tensor{Shape: []int{1024}, Data: make([]float32, 1024)})
	write(ids[3], good)
	p := planH(t, l, ids, seqs)
	if p.Integrity.Hashed != 4 || p.Integrity.Recorded != 2 || len(p.Integrity.Bad) != 2 || p.CachedAlready != 2 {
		t.Fatalf("first use: %+v cached %d", p.Integrity, p.CachedAlready)
	}
	reasons := p.Integrity.Bad[0].Reason + " | " + p.Integrity.Bad[1].Reason
	if !strings.Contains(reasons, "non-finite") || !strings.Contains(reasons, "shape [1024]") {
		t.Fatalf("reasons: %s", reasons)
	}
	// Recorded: the next plan only stats.
	if p := planH(t, l, ids, seqs); p.Integrity.Hashed != 0 || p.Integrity.Checked != 2 {
		t.Fatalf("second use: %+v", p.Integrity)
	}
	// Same contents, new time: hashed once, kept, time recorded.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(hPath(t, l, ids[0]), later, later); err != nil {
		t.Fatal(err)
	}
	if p := planH(t, l, ids, seqs); p.Integrity.Hashed != 1 || p.Integrity.Recorded != 1 || len(p.Integrity.Bad) != 0 {
		t.Fatalf("touched: %+v", p.Integrity)
	}
	if p := planH(t, l, ids, seqs); p.Integrity.Hashed != 0 {
		t.Fatalf("after touch: %+v", p.Integrity)
	}
}

// TestPlanWithoutVerifyChecksNothing: `kinflow plan` reads, never moves.
func TestPlanWithoutVerifyChecksNothing(t *testing.T) {
	l, ids, seqs := hCache(t)
	if err := os.Truncate(hPath(t, l, ids[0]), 100); err != nil {
		t.Fatal(err)
	}
	p, err := l.BuildPlan(context.Background(), PlanRequest{MethodKey: "H", Target: methods.Kcat,
		Profile: methods.ProfileMethodHESM2LastMean, SeqIDs: ids, SeqIDToSeq: seqs})
	if err != nil || p.Integrity != nil || !p.Complete() {
		t.Fatalf("%v %+v", err, p)
	}
}

// TestFileRecordsScannerMatchesJSON: the fast scanner reads what
// encoding/json reads, and falls back to it on what it does not expect.
func TestFileRecordsScannerMatchesJSON(t *testing.T) {
	docs := []string{
		`{"count":2,"entries":{"a":{"bytes":10,"filename":"a.npy","mtime_ns":1700000000123456789,"ready":true,"sha256":"ab","synthetic":true,"updated_at":1.5},"b":{"bytes":3,"x":[1,{"y":"}"}]}},"updated_at":1,"version":1}`,
		"{\n  \"entries\": {\"a\\u0062\": {\"bytes\": 1.0e3, \"sha256\": \"q\\\"\"}},\n \"version\": 1}\n",
		`{"entries":{"a":{"synthetic":"yes","bytes":"7"}}}`,
		`{"entries":[]}`,
		`not json`,
		`{"entries":{"a":{"bytes":1}}`,
	}
	for _, d := range docs {
		got := parseFileRecords([]byte(d))
		want := jsonFileRecords([]byte(d))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n scanner %+v\n json    %+v", d, got, want)
		}
	}
}

// jsonFileRecords is parseFileRecords through encoding/json only.
func jsonFileRecords(b []byte) map[string]FileRecord {
	out := map[string]FileRecord{}
	var m struct {
		Entries map[string]json.RawMessage `json:"entries"`
	}
	if json.Unmarshal(b, &m) != nil {
		return out
	}
	for sid, raw := range m.Entries {
		var e map[string]any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if dec.Decode(&e) != nil {
			continue
		}
		var r FileRecord
		if v, ok := e["bytes"].(json.Number); ok {
			r.Bytes = numberInt(string(v))
		}
		if v, ok := e["mtime_ns"].(json.Number); ok {
			r.MtimeNs = numberInt(string(v))
		}
		r.SHA256, _ = e["sha256"].(string)
		r.Synthetic, _ = e["synthetic"].(bool)
		out[sid] = r
	}
	return out
}

// FuzzFileRecords: the scanner never panics, and whenever it accepts a
// document that encoding/json accepts, both read the same sha256 and
// synthetic flags.
func FuzzFileRecords(f *testing.F) {
	f.Add([]byte(`{"entries":{"a":{"bytes":10,"sha256":"ab","synthetic":true}},"version":1}`))
	f.Add([]byte(`{"entries":{"a\n":{"x":[1,2,{"z":null}]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := scanFileRecords(b)
		if !ok || !json.Valid(b) {
			return
		}
		want := jsonFileRecords(b)
		if len(want) != len(got) {
			return // duplicate keys or non-object entries: both are advisory
		}
		for sid, w := range want {
			g := got[sid]
			if g.SHA256 != w.SHA256 || g.Synthetic != w.Synthetic {
				t.Fatalf("%q: %s scanner %+v json %+v", b, sid, g, w)
			}
		}
	})
}
