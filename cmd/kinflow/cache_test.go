package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	fdir := filepath.Join(media, "sequence_info", f.Dir)
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
