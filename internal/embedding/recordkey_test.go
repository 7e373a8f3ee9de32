package embedding

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/kinflow/kinflow/internal/methods"
)

// withRecordKey sets a record key for the test.
func withRecordKey(t *testing.T, key string) {
	t.Helper()
	SetRecordKey([]byte(key))
	t.Cleanup(func() { SetRecordKey(nil) })
}

// forgeRecord is what someone who can write the media root but holds no
// record key does: replace sid's file with other bytes and rewrite its
// manifest entry to match them (size, times, inode, SHA-256), leaving its
// authentication code as it was (or setting mac when not nil; "" drops it).
func forgeRecord(t *testing.T, l *Layout, sid string, body []byte, mac *string) {
	t.Helper()
	path := hPath(t, l, sid)
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := StatFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(path)
	mpath := filepath.Join(dir, ManifestName)
	b, err := os.ReadFile(mpath)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	e := doc["entries"].(map[string]any)[sid].(map[string]any)
	sum := sha256.Sum256(body)
	e["bytes"], e["mtime_ns"], e["ctime_ns"], e["ino"], e["sha256"] = st.Bytes, st.MtimeNs, st.CtimeNs, st.Ino, hex.EncodeToString(sum[:])
	if mac != nil {
		if *mac == "" {
			delete(e, "mac")
		} else {
			e["mac"] = *mac
		}
	}
	out, _ := json.Marshal(doc)
	if err := os.WriteFile(mpath, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// otherH is a well-formed method H file with another sequence's values.
func otherH(t *testing.T) []byte {
	f, _ := FamilyByName(FamilyESM2LayerLastMean)
	body, err := EncodeArtefact(f.Format, SyntheticArtefact(f, "MWWWWWWWWW"))
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestForgedRecordIsSetAside: with a record key, the writers' records carry
// an authentication code and a clean cache is a stat per file. A record
// rewritten to match new bytes without the key (its old code kept, or a
// code made with another key) fails its code: the plan sets the file aside
// as forged (quarantined, computed again) instead of using its values,
// even though size, times, inode and SHA-256 all agree with the file; the
// check after a method's read reports it too. Computed again with the key,
// the normal path passes.
func TestForgedRecordIsSetAside(t *testing.T) {
	withRecordKey(t, "a record key of the writers, not in the media root")
	l, ids, seqs := hCache(t)
	want := referenceH(t, ids, seqs)
	recs := ReadFileRecords(l.FamilyDir(mustFamily(t, FamilyESM2LayerLastMean)))
	for _, sid := range ids {
		if ok, forged := RecordAuth(l.FamilyDir(mustFamily(t, FamilyESM2LayerLastMean)), sid, recs[sid]); !ok || forged {
			t.Fatalf("the writer's record of %s is not authenticated: %+v", sid, recs[sid])
		}
	}
	if p := planH(t, l, ids, seqs); p.Integrity.Hashed != 0 || p.Integrity.Checked != 3 || !p.Complete() {
		t.Fatalf("clean: %+v", p.Integrity)
	}
	forgeRecord(t, l, ids[1], otherH(t), nil)
	if changed := l.ChangedSinceCheck([]string{hPath(t, l, ids[0]), hPath(t, l, ids[1])}); len(changed) != 1 || changed[0] != hPath(t, l, ids[1]) {
		t.Fatalf("check after the read: %v", changed)
	}
	p := planH(t, l, ids, seqs)
	if len(p.Integrity.Bad) != 1 || p.Integrity.Bad[0].SeqID != ids[1] || p.Integrity.Bad[0].Reason != ForgedReason ||
		p.Integrity.Bad[0].Quarantined == "" || p.NeedComputation != 1 || p.Integrity.Hashed != 0 {
		t.Fatalf("forged record trusted: %+v need %d", p.Integrity, p.NeedComputation)
	}
	if _, err := os.Stat(hPath(t, l, ids[1])); !os.IsNotExist(err) {
		t.Fatalf("the forged file is still in place: %v", err)
	}
	// A code made with another key is no better.
	other := hex.EncodeToString(bytes.Repeat([]byte{7}, sha256.Size))
	if _, err := ComputeStep(context.Background(), l, methods.StepMethodHESM2LastMean, ids, seqs, nil); err != nil {
		t.Fatal(err)
	}
	forgeRecord(t, l, ids[2], otherH(t), &other)
	if p := planH(t, l, ids, seqs); len(p.Integrity.Bad) != 1 || p.Integrity.Bad[0].SeqID != ids[2] || p.Integrity.Bad[0].Reason != ForgedReason {
		t.Fatalf("record with a foreign code trusted: %+v", p.Integrity)
	}
	// With the key, computed again: the normal path, a stat per file.
	if _, err := ComputeStep(context.Background(), l, methods.StepMethodHESM2LastMean, ids, seqs, nil); err != nil {
		t.Fatal(err)
	}
	if p := planH(t, l, ids, seqs); !p.Complete() || len(p.Integrity.Bad) != 0 || p.Integrity.Hashed != 0 {
		t.Fatalf("after recompute: %+v", p.Integrity)
	}
	checkValuesRight(t, l, ids, want)
}

// TestRecordWithoutACodeIsUnauthenticatedNotForged: records written before
// the key was set, or by a writer without it, carry no code. With the key
// such a record is no record: a writer of the storage who rewrote a file
// could have rewritten its record to match and dropped the code. The file
// is not used: it is set aside (as unsigned, not as forged) and the job
// computes it again and records it with a code; the next plan is a stat
// per file. (`kinflow cache adopt` takes such files after its recomputed
// sample matched.) Without a key, codes are neither needed nor checked.
func TestRecordWithoutACodeIsUnauthenticatedNotForged(t *testing.T) {
	l, ids, seqs := hCache(t)
	want := referenceH(t, ids, seqs)
	if p := planH(t, l, ids, seqs); p.Integrity.Hashed != 0 || !p.Complete() {
		t.Fatalf("without a key: %+v", p.Integrity)
	}
	withRecordKey(t, "a record key set after the cache was written")
	p := planH(t, l, ids, seqs)
	if p.Complete() || len(p.Integrity.Bad) != 3 || p.Integrity.Recorded != 0 {
		t.Fatalf("unauthenticated records believed: %+v", p.Integrity)
	}
	for _, b := range p.Integrity.Bad {
		if b.Reason != UnsignedReason {
			t.Fatalf("set aside as %q, want as unsigned", b.Reason)
		}
	}
	if _, err := ComputeStep(context.Background(), l, methods.StepMethodHESM2LastMean, ids, seqs, nil); err != nil {
		t.Fatal(err)
	}
	if p := planH(t, l, ids, seqs); p.Integrity.Hashed != 0 || len(p.Integrity.Bad) != 0 || !p.Complete() {
		t.Fatalf("computed again with a code: %+v", p.Integrity)
	}
	checkValuesRight(t, l, ids, want)
	// A writer without the key drops the code of each record it writes,
	// so a stale code never makes its new record look forged; with the key,
	// its file is computed again.
	SetRecordKey(nil)
	if err := os.Remove(hPath(t, l, ids[0])); err != nil {
		t.Fatal(err)
	}
	if _, err := ComputeStep(context.Background(), l, methods.StepMethodHESM2LastMean, ids[:1], seqs, nil); err != nil {
		t.Fatal(err)
	}
	if e := ReadManifest(l.FamilyDir(mustFamily(t, FamilyESM2LayerLastMean)))[ids[0]]; e.MAC != "" || e.SHA256 == "" {
		t.Fatalf("keyless writer's record: %+v", e)
	}
	withRecordKey(t, "a record key set after the cache was written")
	if p := planH(t, l, ids, seqs); len(p.Integrity.Bad) != 1 || p.Integrity.Bad[0].Reason != UnsignedReason || p.Complete() {
		t.Fatalf("after a keyless writer: %+v", p.Integrity)
	}
}

// TestForgedRecordWithoutACodeIsNotBelieved: a file rewritten with other
// numbers and its record rewritten to match them, the code dropped, is not
// used: the job computes it again and its values are right.
func TestForgedRecordWithoutACodeIsNotBelieved(t *testing.T) {
	l, ids, seqs := hCache(t)
	withRecordKey(t, "the writers' key")
	if _, err := ComputeStep(context.Background(), l, methods.StepMethodHESM2LastMean, ids, seqs, nil); err != nil {
		t.Fatal(err)
	}
	want := referenceH(t, ids, seqs)
	none := ""
	forgeRecord(t, l, ids[1], otherH(t), &none)
	dir := l.FamilyDir(mustFamily(t, FamilyESM2LayerLastMean))
	if e := ReadManifest(dir)[ids[1]]; e.MAC != "" {
		t.Fatalf("forged record kept a code: %+v", e)
	}
	if p := planH(t, l, ids, seqs); p.Complete() {
		t.Fatalf("a record without its code was believed: %+v", p.Integrity)
	}
	if _, err := ComputeStep(context.Background(), l, methods.StepMethodHESM2LastMean, ids, seqs, nil); err != nil {
		t.Fatal(err)
	}
	if p := planH(t, l, ids, seqs); !p.Complete() || len(p.Integrity.Bad) != 0 {
		t.Fatalf("after recompute: %+v", p.Integrity)
	}
	checkValuesRight(t, l, ids, want)
}

func mustFamily(t *testing.T, name string) Family {
	f, ok := FamilyByName(name)
	if !ok {
		t.Fatal(name)
	}
	return f
}

// recordMACVectors are shared with the step programs' writer
// (steps/tests/test_cache_io.py, test_record_mac_matches_the_go_writers):
// both must make the same code of the same record.
var recordMACVectors = []struct {
	scope, sid   string
	size, mt, ct int64
	ino          uint64
	sha          string
	synthetic    bool
	want         string
}{
	{"prot_t5_last/mean_vecs", "0b2b6b8411d2", 4224, 1700000000123456789, 1700000000223456789, 5310708, "AB12", true,
		"19fe4591df54756dcc3d735cf6eab2360f06a379257d723bee5908f34343890c"},
	{"esm2_layer_last_mean", "c9e7ae8c70d7", 10, 1, 2, 3, "ff", false,
		"772a761757a1af1dba3c65a4e14b4021097c3527778642bdcd808d09a87715a6"},
}

func TestRecordMACVectors(t *testing.T) {
	for _, v := range recordMACVectors {
		m := recordMAC([]byte("kinflow shared test vector key"), v.scope, v.sid, v.size, v.mt, v.ct, v.ino, v.sha, v.synthetic)
		if got := hex.EncodeToString(m[:]); got != v.want {
			t.Errorf("%s/%s: %s, want %s", v.scope, v.sid, got, v.want)
		}
	}
	if got := recordScope("/srv/media/sequence_info/prot_t5_last/mean_vecs"); got != "prot_t5_last/mean_vecs" {
		t.Errorf("scope %q", got)
	}
}
