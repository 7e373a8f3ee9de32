package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/cacheadmin"
	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/predcache"
	"github.com/kinflow/kinflow/internal/store"
)

// TestCacheCommands runs `kinflow cache` on a media root holding files of
// unknown origin, with the synthetic executor as the configured program.
func TestCacheCommands(t *testing.T) {
	dir := t.TempDir()
	url := "sqlite:" + filepath.Join(dir, "k.db")
	media := filepath.Join(dir, "media")
	t.Setenv("KINFLOW_DATABASE_URL", url)
	t.Setenv("KINFLOW_MEDIA_ROOT", media)
	t.Setenv("KINFLOW_STEP_EXECUTOR", "synthetic")
	ctx := context.Background()
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	seqs := []string{"MKTAYIAKQR", "MKVLAAGIT", "MSTNPKPQRKTKR"}
	ids, err := st.SeqIDs(ctx, seqs)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := embedding.FamilyByName(embedding.FamilyESM2LayerLastMean)
	fdir := filepath.Join(media, "sequence_info", f.Name)
	if err := os.MkdirAll(fdir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(sid, seq string) {
		body, _ := embedding.EncodeArtefact(f.Format, embedding.SyntheticArtefact(f, seq))
		if err := os.WriteFile(filepath.Join(fdir, sid+".npy"), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, sid := range ids {
		write(sid, seqs[i])
	}
	cli := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if rc := run(ctx, append([]string{"cache"}, args...), &out, &errb); rc != want {
			t.Fatalf("cache %v: rc %d, want %d: %s%s", args, rc, want, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	if got := cli(0, "status"); !strings.Contains(got, "esm2_layer_last_mean") || !strings.Contains(got, "unverified") || !strings.Contains(got, "(none recorded)") {
		t.Fatalf("status:\n%s", got)
	}
	// Files without a record (a foreign writer's) fail a verify, even when
	// the recomputed sample matches: nothing vouches for the rest.
	if got := cli(1, "verify", "--family", f.Name, "--sample", "3", "--seed", "7"); !strings.Contains(got, "3 file(s) without an integrity record") ||
		!strings.Contains(got, "kinflow cache adopt") {
		t.Fatalf("verify of unrecorded files:\n%s", got)
	}
	if got := cli(0, "adopt", "--family", f.Name, "--sample", "3", "--seed", "7"); !strings.Contains(got, "3 of 3 recomputed file(s) within the bound") ||
		!strings.Contains(got, "3 file(s) without a record checked and recorded") ||
		!strings.Contains(got, "adopted "+f.Name+" under fingerprint synthetic-") {
		t.Fatalf("adopt of unrecorded files:\n%s", got)
	}
	// Adopt recorded each file's hash: a planted file is found by verify,
	// set aside, and repair recomputes it.
	write(ids[1], seqs[0])
	if got := cli(1, "verify", "--family", f.Name, "--sample", "3"); !strings.Contains(got, "BAD "+f.Name+"/"+ids[1]) || !strings.Contains(got, "set aside") {
		t.Fatalf("verify of a planted file:\n%s", got)
	}
	if got := cli(0, "status"); !strings.Contains(got, "QUARANTINED") {
		t.Fatalf("status after verify:\n%s", got)
	}
	if got := cli(0, "repair", "--family", f.Name); !strings.Contains(got, "1 recomputed with step methodh_esm2_last_mean") {
		t.Fatalf("repair:\n%s", got)
	}
	if got := cli(0, "purge", "--family", f.Name); !strings.Contains(got, "purged 3 files") {
		t.Fatalf("purge:\n%s", got)
	}
	cli(2, "verify")
	cli(1, "purge", "--family", "no/such")
}

// TestCachePredictionsCommands: status counts, purge by method and version,
// usage errors.
func TestCachePredictionsCommands(t *testing.T) {
	url := "sqlite:" + filepath.Join(t.TempDir(), "p.db")
	t.Setenv("KINFLOW_DATABASE_URL", url)
	ctx := context.Background()
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	pc := predcache.New(st)
	v := 1.0
	for i, mv := range []struct{ m, v string }{{"B", "1"}, {"B", "1"}, {"B", "2"}, {"C", "1"}} {
		k := predcache.NewKeyer(predcache.Stage{Method: mv.m, ModelVersion: mv.v}).Key(predcache.Unit{Seq: strings.Repeat("M", i+1)})
		if err := pc.Store(ctx, mv.m, mv.v, []predcache.Put{{Key: k, Value: &v}}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	runCode := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		rc := run(ctx, args, &out, &errb)
		return rc, out.String() + errb.String()
	}
	if rc, out := runCode("cache", "predictions", "status"); rc != 0 || !strings.Contains(out, "4 cached prediction units for every method") {
		t.Fatalf("status: %d %s", rc, out)
	}
	if rc, out := runCode("cache", "predictions", "purge", "--method", "B", "--version", "2"); rc != 0 || !strings.Contains(out, "removed 1 cached prediction units of method B (model_version 2)") {
		t.Fatalf("purge B v2: %d %s", rc, out)
	}
	if rc, out := runCode("cache", "predictions", "purge", "--method", "B"); rc != 0 || !strings.Contains(out, "removed 2 ") {
		t.Fatalf("purge B: %d %s", rc, out)
	}
	if rc, out := runCode("cache", "predictions", "status", "--method", "C"); rc != 0 || !strings.Contains(out, "1 cached prediction units for method C") {
		t.Fatalf("status C: %d %s", rc, out)
	}
	for _, args := range [][]string{{"cache", "predictions"}, {"cache", "predictions", "purge"}, {"cache", "predictions", "drop"}} {
		if rc, _ := runCode(args...); rc != 2 {
			t.Errorf("%v: rc %d, want 2", args, rc)
		}
	}
}

// TestCacheStatusOldFormatRecords: after an upgrade, records an older
// kinflow wrote (a hash, size and mtime, no ctime_ns or ino) are counted
// and shown as old-format, with the command that upgrades them, not as
// mismatched; a file touched since its old record stays mismatched. (That
// `cache verify` records both anew is cacheadmin's
// TestOldFormatRecordsAreNotMismatches: verify needs real files, and the
// synthetic executor's are synthetic.)
func TestCacheStatusOldFormatRecords(t *testing.T) {
	dir := t.TempDir()
	url := "sqlite:" + filepath.Join(dir, "k.db")
	media := filepath.Join(dir, "media")
	t.Setenv("KINFLOW_DATABASE_URL", url)
	t.Setenv("KINFLOW_MEDIA_ROOT", media)
	t.Setenv("KINFLOW_STEP_EXECUTOR", "synthetic")
	ctx := context.Background()
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	seqs := []string{"MKTAYIAKQR", "MKVLAAGIT", "MSTNPKPQRKTKR"}
	ids, err := st.SeqIDs(ctx, seqs)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := embedding.FamilyByName(embedding.FamilyESM2LayerLastMean)
	fdir := filepath.Join(media, "sequence_info", f.Name)
	if err := os.MkdirAll(fdir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, sid := range ids {
		body, _ := embedding.EncodeArtefact(f.Format, embedding.SyntheticArtefact(f, seqs[i]))
		if err := os.WriteFile(filepath.Join(fdir, sid+".npy"), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cli := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if rc := run(ctx, append([]string{"cache"}, args...), &out, &errb); rc != want {
			t.Fatalf("cache %v: rc %d, want %d: %s%s", args, rc, want, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	cli(0, "adopt", "--family", f.Name, "--sample", "3", "--seed", "7")

	// Turn two records into the old shape; touch the second one's file.
	mpath := filepath.Join(fdir, embedding.ManifestName)
	raw, err := os.ReadFile(mpath)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // nanosecond times do not fit a float64
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	entries := m["entries"].(map[string]any)
	for _, sid := range ids[:2] {
		e := entries[sid].(map[string]any)
		if _, ok := e["sha256"].(string); !ok || e["ino"] == nil || e["ctime_ns"] == nil {
			t.Fatalf("adopt's record of %s is not a full one: %v", sid, e)
		}
		delete(e, "ino")
		delete(e, "ctime_ns")
	}
	if raw, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mpath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(fdir, ids[1]+".npy"), later, later); err != nil {
		t.Fatal(err)
	}

	// columns reads the family's line of the status table by column name.
	columns := func(out string) map[string]string {
		t.Helper()
		lines := strings.Split(out, "\n")
		head := strings.Fields(lines[0])
		for _, l := range lines[1:] {
			if v := strings.Fields(l); len(v) >= len(head) && v[0] == f.Name {
				cols := map[string]string{}
				for i, h := range head {
					cols[h] = v[i]
				}
				return cols
			}
		}
		t.Fatalf("no line for %s:\n%s", f.Name, out)
		return nil
	}
	out := cli(0, "status")
	if c := columns(out); c["OLD-FORMAT"] != "1" || c["MISMATCHED"] != "1" || c["UNHASHED"] != "0" {
		t.Fatalf("status with one old-format record and one touched file:\n%s", out)
	}
	// The family is synthetic (the synthetic executor wrote it), which
	// verify does not take: the hint says the next use upgrades them.
	hint := f.Name + ": 1 file(s) with an old-format integrity record (written by an older kinflow, without the inode fields): not damage; " +
		"each is hashed once at its next use and recorded anew\n"
	if !strings.Contains(out, hint) {
		t.Fatalf("status without the old-format hint:\n%s", out)
	}
	var js []map[string]any
	if err := json.Unmarshal([]byte(cli(0, "status", "--json")), &js); err != nil || len(js) != 1 || js[0]["old_format"] != 1.0 || js[0]["mismatched"] != 1.0 {
		t.Fatalf("status --json: %v %v", js, err)
	}
}

// TestCacheStatusOldFormatHintNamesVerify: for a family with real files,
// the old-format line names the command that records them all anew now.
func TestCacheStatusOldFormatHintNamesVerify(t *testing.T) {
	var out bytes.Buffer
	st := []cacheadmin.FamilyStatus{{Family: "esm2_layer_26/mean_vecs", Files: 5, OldFormat: 4, Mismatched: 1}, {Family: "prot_t5_mean", Files: 2}}
	if err := printCacheStatus(st, &out); err != nil {
		t.Fatal(err)
	}
	want := "esm2_layer_26/mean_vecs: 4 file(s) with an old-format integrity record (written by an older kinflow, without the inode fields): not damage; " +
		"each is hashed once at its next use and recorded anew, or all now with `kinflow cache verify --family esm2_layer_26/mean_vecs`\n"
	if !strings.HasSuffix(out.String(), want) || strings.Count(out.String(), "old-format") != 1 {
		t.Fatalf("status:\n%s", out.String())
	}
}
