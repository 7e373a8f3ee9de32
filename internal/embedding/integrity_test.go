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
		// The final stat, inode change time included (recorded after the
		// rename): the fast path's test holds.
		if st, err := StatFile(hPath(t, l, sid)); err != nil || !r.Matches(st) {
			t.Fatalf("%s: record %+v, stat %+v %v", sid, r, st, err)
		}
	}
	p := planH(t, l, ids, seqs)
	if !p.Complete() || p.Integrity == nil || p.Integrity.Checked != 3 || p.Integrity.Hashed != 0 || len(p.Integrity.Bad) != 0 {
		t.Fatalf("clean cache: %+v %+v", p, p.Integrity)
	}
}

// TestIntegrityFindsOverwriteAndTruncation: a file
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
// reference deployment's, a foreign writer's) is never trusted on first
// read: a plan sets it aside to be computed again. An adopt
// (AdoptUnrecorded) checks such files for shape and finite values and
// records the good ones; a touched but unchanged file is then hashed once
// and its new stat recorded.
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
	writeAll := func() {
		write(ids[0], good)
		write(ids[1], nan)
		write(ids[2], Tensor{Shape: []int{1024}, Data: make([]float32, 1024)})
		write(ids[3], good)
	}
	writeAll()
	// A plan trusts none of them: all four are set aside, as missing.
	p := planH(t, l, ids, seqs)
	if p.Integrity.Hashed != 0 || len(p.Integrity.Bad) != 4 || p.CachedAlready != 0 || p.NeedComputation != 4 {
		t.Fatalf("plan over unrecorded files: %+v cached %d", p.Integrity, p.CachedAlready)
	}
	for _, b := range p.Integrity.Bad {
		if b.Reason != UnrecordedReason || b.Quarantined == "" {
			t.Fatalf("bad file %+v", b)
		}
	}
	// verify's view keeps them in place and lists them.
	writeAll()
	all := func() []bool { return []bool{true, true, true, true} }
	in, err := l.CheckFamily(f, ids, all(), nil, CheckOptions{HashAll: true, KeepUnrecorded: true})
	if err != nil || len(in.Unrecorded) != 4 || len(in.Bad) != 0 {
		t.Fatalf("keep unrecorded: %+v %v", in, err)
	}
	// An adopt records the good ones and sets the bad ones aside.
	in, err = l.CheckFamily(f, ids, all(), func(int) int { return 10 }, CheckOptions{HashAll: true, AdoptUnrecorded: true})
	if err != nil || in.Hashed != 4 || in.Recorded != 2 || len(in.Bad) != 2 {
		t.Fatalf("adopt: %+v %v", in, err)
	}
	reasons := in.Bad[0].Reason + " | " + in.Bad[1].Reason
	if !strings.Contains(reasons, "non-finite") || !strings.Contains(reasons, "shape [1024]") {
		t.Fatalf("reasons: %s", reasons)
	}
	// Recorded: the next plan only stats.
	if p := planH(t, l, ids, seqs); p.Integrity.Hashed != 0 || p.Integrity.Checked != 2 || p.CachedAlready != 2 {
		t.Fatalf("second use: %+v", p.Integrity)
	}
	// Same contents, new time: hashed once, kept, stat recorded.
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

// referenceH is the synthetic writer's bytes of each id's method H file,
// written into a fresh layout.
func referenceH(t *testing.T, ids []string, seqs map[string]string) map[string][]byte {
	t.Helper()
	ref := newLayout(t)
	if _, err := ComputeStep(context.Background(), ref, methods.StepMethodHESM2LastMean, ids, seqs, nil); err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, sid := range ids {
		b, err := os.ReadFile(hPath(t, ref, sid))
		if err != nil {
			t.Fatal(err)
		}
		out[sid] = b
	}
	return out
}

// overwriteInPlace writes other numbers of the same shape into path's
// inode and puts its modification time back, as `os.utime` would.
func overwriteInPlace(t *testing.T, path string) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	other := Tensor{Shape: []int{1280}, Data: make([]float32, 1280)}
	for i := range other.Data {
		other.Data[i] = 7
	}
	b, _ := EncodeNPY(other)
	fh, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	if err := os.Chtimes(path, info.ModTime(), info.ModTime()); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(path)
	if after.Size() != info.Size() || !after.ModTime().Equal(info.ModTime()) {
		t.Fatalf("the forgery did not keep size and time: %v %v", info, after)
	}
}

// checkValuesRight: after a recompute every file holds the writer's values.
func checkValuesRight(t *testing.T, l *Layout, ids []string, want map[string][]byte) {
	t.Helper()
	for _, sid := range ids {
		got, err := os.ReadFile(hPath(t, l, sid))
		if err != nil || !bytes.Equal(got, want[sid]) {
			t.Fatalf("%s: values not the writer's (%v)", sid, err)
		}
	}
}

// TestIntegrityOverwriteWithTimeRestored is the forgery a writer can try: a file
// overwritten in place with its modification time put back keeps its size
// and mtime, but not its inode change time: the plan hashes it, sets it
// aside, and the recomputed file holds the right values.
func TestIntegrityOverwriteWithTimeRestored(t *testing.T) {
	l, ids, seqs := hCache(t)
	want := referenceH(t, ids, seqs)
	// The writer recorded the final stat: a clean cache is a stat.
	if p := planH(t, l, ids, seqs); p.Integrity.Hashed != 0 || !p.Complete() {
		t.Fatalf("clean: %+v", p.Integrity)
	}
	overwriteInPlace(t, hPath(t, l, ids[1]))
	p := planH(t, l, ids, seqs)
	if len(p.Integrity.Bad) != 1 || p.Integrity.Bad[0].SeqID != ids[1] || !strings.Contains(p.Integrity.Bad[0].Reason, "SHA-256") || p.NeedComputation != 1 {
		t.Fatalf("forged file not caught: %+v", p.Integrity)
	}
	if _, err := ComputeStep(context.Background(), l, methods.StepMethodHESM2LastMean, ids, seqs, nil); err != nil {
		t.Fatal(err)
	}
	if p := planH(t, l, ids, seqs); !p.Complete() || len(p.Integrity.Bad) != 0 {
		t.Fatalf("after recompute: %+v", p.Integrity)
	}
	checkValuesRight(t, l, ids, want)
}

// TestIntegrityDamagedManifest: with the family's manifest truncated or
// deleted, no file is trusted on its first read (one of them was
// overwritten meanwhile): all are set aside and recomputed, the values are
// right, and the manifest is rebuilt from the recomputed files only.
func TestIntegrityDamagedManifest(t *testing.T) {
	for _, damage := range []string{"truncated", "deleted"} {
		t.Run(damage, func(t *testing.T) {
			l, ids, seqs := hCache(t)
			want := referenceH(t, ids, seqs)
			f, _ := FamilyByName(FamilyESM2LayerLastMean)
			manifest := filepath.Join(l.FamilyDir(f), ManifestName)
			if damage == "truncated" {
				if err := os.Truncate(manifest, 40); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Remove(manifest); err != nil {
				t.Fatal(err)
			}
			overwriteInPlace(t, hPath(t, l, ids[0]))
			p := planH(t, l, ids, seqs)
			if len(p.Integrity.Bad) != 3 || p.NeedComputation != 3 || p.Integrity.Recorded != 0 {
				t.Fatalf("unrecorded files trusted: %+v", p.Integrity)
			}
			if n := len(ReadFileRecords(l.FamilyDir(f))); n != 0 {
				t.Fatalf("%d record(s) made of unproven files", n)
			}
			if _, err := ComputeStep(context.Background(), l, methods.StepMethodHESM2LastMean, ids, seqs, nil); err != nil {
				t.Fatal(err)
			}
			if p := planH(t, l, ids, seqs); !p.Complete() || len(p.Integrity.Bad) != 0 || p.Integrity.Hashed != 0 {
				t.Fatalf("after recompute: %+v", p.Integrity)
			}
			checkValuesRight(t, l, ids, want)
			if n := len(ReadFileRecords(l.FamilyDir(f))); n != 3 {
				t.Fatalf("rebuilt manifest holds %d records", n)
			}
		})
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
		`{"count":2,"entries":{"a":{"bytes":10,"ctime_ns":1700000000223456789,"filename":"a.npy","ino":5310708,"mtime_ns":1700000000123456789,"ready":true,"sha256":"ab","synthetic":true,"updated_at":1.5},"b":{"bytes":3,"x":[1,{"y":"}"}]}},"updated_at":1,"version":1}`,
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

// TestScanRecordsOfChecksWhatItSkips: an entry skipped because it was not
// asked for is checked as strictly as one decoded, so a document the full
// scan refuses (and so falls back to encoding/json) is refused with a
// filter too, and the entries asked for read the same.
func TestScanRecordsOfChecksWhatItSkips(t *testing.T) {
	docs := []string{
		`{"count":2,"entries":{"a":{"bytes":10,"sha256":"ab","mtime_ns":5},"b":{"bytes":3,"x":[1,{"y":"}"}]}},"version":1}`,
		`{"entries":{"a":{"bytes":1},"b":{"bytes" 2}}}`,
		`{"entries":{"a":{"bytes":1},"b":{"bytes":}}}`,
		`{"entries":{"a":{"bytes":1},"b":{"sha256":"ab}}}`,
		`{"entries":{"b":{"bytes":1,},"a":{"bytes":1}}}`,
		`{"entries":{"a":{"bytes":1},"b":[1,2}}`,
		`{"entries":{"a":{"bytes":1},"b":{"bytes":2}}`,
	}
	for _, d := range docs {
		all := map[string]rawRecord{}
		okAll := scanRecords([]byte(d), func(sid []byte, r rawRecord) { all[string(sid)] = r })
		some := map[string]rawRecord{}
		okSome := scanRecordsOf([]byte(d), func(sid []byte) bool { return string(sid) == "a" },
			func(sid []byte, r rawRecord) { some[string(sid)] = r })
		if okAll != okSome {
			t.Errorf("%s: full scan ok=%v, filtered ok=%v", d, okAll, okSome)
			continue
		}
		if _, ok := some["b"]; ok {
			t.Errorf("%s: an entry not asked for was decoded", d)
		}
		if okAll && !reflect.DeepEqual(all["a"], some["a"]) {
			t.Errorf("%s: a: full %+v, filtered %+v", d, all["a"], some["a"])
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
		if v, ok := e["ctime_ns"].(json.Number); ok {
			r.CtimeNs = numberInt(string(v))
		}
		if v, ok := e["ino"].(json.Number); ok {
			r.Ino = uint64(numberInt(string(v)))
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

// TestChangedSinceCheckAndRecordWritten: the check after a method's read
// finds exactly the file changed since its record (a path given twice
// counts once per mention), and the GPU host's RecordWritten takes a
// recorded file as it is, records an unrecorded good one and reports a bad
// one; both read only the records they need from the manifest.
func TestChangedSinceCheckAndRecordWritten(t *testing.T) {
	l, ids, _ := hCache(t)
	a, b, c := hPath(t, l, ids[0]), hPath(t, l, ids[1]), hPath(t, l, ids[2])
	if ch := l.ChangedSinceCheck([]string{a, b, a, c}); len(ch) != 0 {
		t.Fatalf("untouched cache changed: %v", ch)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(b, later, later); err != nil {
		t.Fatal(err)
	}
	if ch := l.ChangedSinceCheck([]string{a, b, c, b}); !reflect.DeepEqual(ch, []string{b, b}) {
		t.Fatalf("changed %v, want b twice", ch)
	}
	// A good file without a matching record is hashed and recorded; a file
	// of the wrong shape is reported; the recorded one is left as it is.
	bad := filepath.Join(filepath.Dir(a), "0000badbad00.npy")
	if err := os.WriteFile(bad, []byte("not an array"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := l.RecordWritten([]string{a, b, bad})
	if err != nil || len(got) != 1 || got[bad] == "" {
		t.Fatalf("RecordWritten: %v %v", got, err)
	}
	if ch := l.ChangedSinceCheck([]string{a, b, c}); len(ch) != 0 {
		t.Fatalf("after RecordWritten: %v", ch)
	}
}
