package api

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestStatusReadsShareKeyLookups: a key's status reads within keyCacheTTL
// look the key up once; a revocation through this process ends them at
// once; an owner blocked by another process (the store directly, as the
// CLI does) is refused on every other route at once and on status reads
// within keyCacheTTL.
func TestStatusReadsShareKeyLookups(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "203.0.113.91"
		key := h.newKey(ip)
		id := h.submitted(ip, key)
		var lookups atomic.Int64
		count := func(tx *gorm.DB) {
			if strings.Contains(tx.Statement.SQL.String(), "api_keys") {
				lookups.Add(1)
			}
		}
		if err := st.DB.Callback().Row().After("gorm:row").Register("test:count_key_lookups", count); err != nil {
			t.Fatal(err)
		}
		defer st.DB.Callback().Row().Remove("test:count_key_lookups")
		start := time.Now()
		for range 5 {
			wantStatus(t, h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil), 200)
		}
		if n := lookups.Load(); n != 1 && time.Since(start) < keyCacheTTL {
			t.Fatalf("%d key lookups for 5 status reads within %v", n, keyCacheTTL)
		}
		// Every other route looks its key up afresh.
		before := lookups.Load()
		wantStatus(t, h.do("GET", "/api/v1/quota/", ip, key, nil), 200)
		if lookups.Load() == before {
			t.Fatal("/quota/ answered from the status reads' key cache")
		}

		// Blocked by another process: refused at once elsewhere, and on
		// status reads once the cached lookup is older than its bound.
		if err := st.SetUserBlocked(t.Context(), ip, true, t0); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, h.do("GET", "/api/v1/quota/", ip, key, nil), 403)
		time.Sleep(keyCacheTTL)
		wantStatus(t, h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil), 403)
		if err := st.SetUserBlocked(t.Context(), ip, false, t0); err != nil {
			t.Fatal(err)
		}

		// Revoked through this process: the next status read is refused.
		wantStatus(t, h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil), 200)
		wantStatus(t, h.do("POST", "/api/api-key/revoke/", ip, "", nil), 200)
		wantStatus(t, h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil), 401)
	})
}

// TestKeyCacheBoundsAndForget: the cache serves nothing of another day or
// older than keyCacheTTL, holds at most keyCacheMax keys (stale ones dropped
// first), and a lookup begun before forget is not recorded after it.
func TestKeyCacheBoundsAndForget(t *testing.T) {
	var kc keyCache
	k := &store.AuthKey{ID: 7}
	_, gen, _ := kc.get("h", "2026-11-29")
	kc.put("h", "2026-11-29", k, gen)
	if got, _, ok := kc.get("h", "2026-11-29"); !ok || got.ID != 7 {
		t.Fatalf("fresh entry: %v %v", got, ok)
	}
	if _, _, ok := kc.get("h", "2026-11-30"); ok {
		t.Fatal("served for another day")
	}
	kc.m["2026-11-29h"] = keyCached{k: *k, at: time.Now().Add(-keyCacheTTL)}
	if _, _, ok := kc.get("h", "2026-11-29"); ok {
		t.Fatal("served past its time-to-live")
	}
	_, gen, _ = kc.get("late", "2026-11-29")
	kc.forget()
	kc.put("late", "2026-11-29", k, gen)
	if _, _, ok := kc.get("late", "2026-11-29"); ok {
		t.Fatal("a lookup begun before forget was recorded after it")
	}
	_, gen, _ = kc.get("x", "2026-11-29")
	for i := range keyCacheMax {
		kc.put(fmt.Sprint(i), "2026-11-29", k, gen)
		if i%2 == 0 {
			e := kc.m["2026-11-29"+fmt.Sprint(i)]
			e.at = e.at.Add(-2 * keyCacheTTL)
			kc.m["2026-11-29"+fmt.Sprint(i)] = e
		}
	}
	kc.put("one more", "2026-11-29", k, gen)
	if n := len(kc.m); n != keyCacheMax/2+1 {
		t.Fatalf("%d entries after the stale half was dropped, want %d", n, keyCacheMax/2+1)
	}
}
