package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
)

func TestKeyAdminCommands(t *testing.T) {
	dir := t.TempDir()
	url := "sqlite:" + filepath.Join(dir, "k.db")
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
	full := "ak_" + strings.Repeat("0", 58) + "3f9a1c"
	hash := "3a1f1c4c9a6b6c8c6b7d1f0b7f3a2c2d8c9f0c7b6e2d6e1c1b1a0f9e8d7c6b5a" // not this key's: found by suffix
	if _, err := st.ActivateKey(ctx, "203.0.113.7", hash, "3f9a1c", time.Now()); err != nil {
		t.Fatal(err)
	}
	runOK := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if rc := run(ctx, args, &out, &errb); rc != 0 {
			t.Fatalf("%v: rc %d: %s", args, rc, errb.String())
		}
		return out.String()
	}
	if got := runOK("key", "limit", "…3f9a1c", "50"); !strings.Contains(got, "daily limit 50") {
		t.Fatalf("limit: %q", got)
	}
	k, err := st.FindKey(ctx, "3f9a1c")
	if err != nil || k.CustomDailyLimit == nil || *k.CustomDailyLimit != 50 {
		t.Fatalf("after limit: %+v %v", k, err)
	}
	runOK("key", "limit", "3f9a1c", "default")
	if k, _ = st.FindKey(ctx, "3f9a1c"); k.CustomDailyLimit != nil {
		t.Fatalf("limit not reset: %v", *k.CustomDailyLimit)
	}
	runOK("key", "block", "3f9a1c")
	if blocked, _ := st.TouchUser(ctx, "203.0.113.7", time.Now()); !blocked {
		t.Fatal("not blocked")
	}
	runOK("key", "unblock", "3f9a1c")
	if blocked, _ := st.TouchUser(ctx, "203.0.113.7", time.Now()); blocked {
		t.Fatal("still blocked")
	}
	// weight: stored with the key, read by a job's start, back to the
	// default (nil) on "default"; out-of-range weights are usage errors.
	if got := runOK("key", "weight", "3f9a1c", "2"); !strings.Contains(got, "weight 2") {
		t.Fatalf("weight: %q", got)
	}
	if w, err := st.KeyWeight(ctx, k.ID); err != nil || w == nil || *w != 2 {
		t.Fatalf("after weight: %v %v", w, err)
	}
	runOK("key", "weight", "3f9a1c", "default")
	if w, err := st.KeyWeight(ctx, k.ID); err != nil || w != nil {
		t.Fatalf("weight not reset: %v %v", w, err)
	}
	// usage: nothing unfinished, then one key's waiting and running work.
	if got := runOK("keys", "usage"); !strings.Contains(got, "no unfinished jobs") {
		t.Fatalf("usage of an idle service: %q", got)
	}
	for i, j := range []store.Job{
		{ID: "ja", KeyID: k.ID, Status: store.JobPending, Priority: "normal", RequestedRows: 150},
		{ID: "jb", KeyID: k.ID, Status: store.JobPending, Priority: "normal", RequestedRows: 100},
		{ID: "jc", KeyID: k.ID, Status: store.JobProcessing, Priority: "normal", RequestedRows: 7},
		{ID: "jd", KeyID: k.ID, Status: store.JobCompleted, Priority: "normal", RequestedRows: 9999},
	} {
		j.SubmittedAt = time.Now().Add(time.Duration(i) * time.Second)
		if err := st.DB.Create(&j).Error; err != nil {
			t.Fatal(err)
		}
	}
	got := runOK("key", "usage")
	if !strings.Contains(got, "WAITING ROWS") || !regexp.MustCompile(fmt.Sprintf(`key-%d\s+1\s+normal\s+2\s+250\s+1\s+7\n`, k.ID)).MatchString(got) {
		t.Fatalf("usage:\n%s", got)
	}
	var out, errb bytes.Buffer
	for args, rc := range map[string]int{"key weight 3f9a1c 0": 2, "key weight 3f9a1c 1000": 2, "key weight 3f9a1c": 2, "key usage x": 2, "key limit 3f9a1c": 2, "key limit 3f9a1c -4": 2, "key block nosuch": 1, "key limit " + full + " 5": 1} {
		if got := run(ctx, strings.Fields(args), &out, &errb); got != rc {
			t.Errorf("%s: rc %d, want %d (%s)", args, got, rc, errb.String())
		}
	}
}
