package main

import (
	"bytes"
	"context"
	"path/filepath"
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
	var out, errb bytes.Buffer
	for args, rc := range map[string]int{"key limit 3f9a1c": 2, "key limit 3f9a1c -4": 2, "key block nosuch": 1, "key limit " + full + " 5": 1} {
		if got := run(ctx, strings.Fields(args), &out, &errb); got != rc {
			t.Errorf("%s: rc %d, want %d (%s)", args, got, rc, errb.String())
		}
	}
}
