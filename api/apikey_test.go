package api

import (
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

var keyPattern = regexp.MustCompile(`^ak_[0-9a-f]{64}$`)

func TestKeyLifecycle(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "203.0.113.7"

		r := h.do("GET", "/api/api-key/", ip, "", nil)
		wantStatus(t, r, 200)
		if r.Body.String() != `{"hasKey":false}` {
			t.Fatalf("no key: %s", r.Body)
		}

		r = h.do("POST", "/api/api-key/generate/", ip, "", nil)
		wantStatus(t, r, 201)
		g := r.json(t)
		key := g["key"].(string)
		if !keyPattern.MatchString(key) {
			t.Fatalf("key %q", key)
		}
		if g["keySuffix"] != "…"+key[len(key)-6:] || g["message"] == "" {
			t.Fatalf("generate body %v", g)
		}
		// Only the hash is stored.
		var k store.APIKey
		if err := st.DB.Where("ip_address = ?", ip).Take(&k).Error; err != nil {
			t.Fatal(err)
		}
		if k.KeyHash != store.HashKey(key) || strings.Contains(k.KeyHash, key[3:]) || k.KeySuffix != key[len(key)-6:] {
			t.Fatalf("stored key row %+v", k)
		}

		wantStatus(t, h.do("POST", "/api/api-key/generate/", ip, "", nil), 409)

		r = h.do("GET", "/api/api-key", ip, "", nil) // without the slash too
		wantStatus(t, r, 200)
		if s := r.json(t); s["hasKey"] != true || s["keySuffix"] != "…"+key[len(key)-6:] {
			t.Fatalf("status %v", s)
		}
		wantStatus(t, h.do("GET", "/api/v1/quota/", ip, key, nil), 200)

		// Another IP sees nothing and cannot revoke this key.
		wantStatus(t, h.do("POST", "/api/api-key/revoke/", "198.51.100.1", "", nil), 404)

		r = h.do("POST", "/api/api-key/revoke", ip, "", nil)
		wantStatus(t, r, 200)
		if r.Body.String() != `{"revoked":true}` {
			t.Fatalf("revoke body %s", r.Body)
		}
		r = h.do("GET", "/api/v1/quota/", ip, key, nil)
		wantStatus(t, r, 401)
		if r.json(t)["error"] != msgInvalidKey {
			t.Fatalf("revoked key: %s", r.Body)
		}
		wantStatus(t, h.do("POST", "/api/api-key/revoke/", ip, "", nil), 404)

		key2 := h.newKey(ip)
		if key2 == key {
			t.Fatal("the same key twice")
		}
		wantStatus(t, h.do("GET", "/api/v1/quota/", ip, key2, nil), 200)
		wantStatus(t, h.do("GET", "/api/v1/quota/", ip, key, nil), 401)
		// The revoked row was reused: the key id (quota, jobs) survives.
		var n int64
		st.DB.Model(&store.APIKey{}).Where("ip_address = ?", ip).Count(&n)
		if n != 1 {
			t.Fatalf("%d key rows for one IP", n)
		}
	})
}

func TestKeyRoutesMethods(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		for _, c := range []struct{ method, path string }{
			{"POST", "/api/api-key/"}, {"DELETE", "/api/api-key"}, {"GET", "/api/api-key/generate/"}, {"GET", "/api/api-key/revoke"},
		} {
			r := h.do(c.method, c.path, "192.0.2.1", "", nil)
			wantStatus(t, r, http.StatusMethodNotAllowed)
			if r.json(t)["error"] == "" || r.Header().Get("Allow") == "" {
				t.Fatalf("%s %s: %s allow=%q", c.method, c.path, r.Body, r.Header().Get("Allow"))
			}
		}
	})
}

func TestGenerateBlocked(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "192.0.2.50"
		key := h.newKey(ip)
		if err := st.DB.Model(&store.APIUser{}).Where("ip_address = ?", ip).Update("is_blocked", true).Error; err != nil {
			t.Fatal(err)
		}
		r := h.do("GET", "/api/v1/quota/", ip, key, nil)
		wantStatus(t, r, 403)
		if r.json(t)["error"] != msgSuspended {
			t.Fatalf("%s", r.Body)
		}
		wantStatus(t, h.do("POST", "/api/api-key/revoke/", ip, "", nil), 200)
		wantStatus(t, h.do("POST", "/api/api-key/generate/", ip, "", nil), 403)
	})
}

// TestGenerateRace: many concurrent generates for one IP make exactly one key.
func TestGenerateRace(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		for round := range 2 { // a fresh IP, then a revoked row to reuse
			const ip = "192.0.2.99"
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				created int
				codes   = map[int]int{}
			)
			for range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := h.do("POST", "/api/api-key/generate/", ip, "", nil)
					mu.Lock()
					codes[r.Code]++
					if r.Code == 201 {
						created++
					}
					mu.Unlock()
				}()
			}
			wg.Wait()
			if created != 1 || codes[409] != 19 {
				t.Fatalf("round %d: codes %v", round, codes)
			}
			wantStatus(t, h.do("POST", "/api/api-key/revoke/", ip, "", nil), 200)
		}
	})
}

func TestAuthFailures(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		key := h.newKey("192.0.2.2")
		for _, c := range []struct {
			name, auth, want string
		}{
			{"none", "", msgAuthRequired},
			{"lowercase scheme", "bearer " + key, msgAuthRequired},
			{"no space", "Bearer" + key, msgAuthRequired},
			{"token scheme", "Token " + key, msgAuthRequired},
			{"empty token", "Bearer ", msgInvalidKey},
			{"wrong key", "Bearer ak_" + strings.Repeat("0", 64), msgInvalidKey},
			{"truncated", "Bearer " + key[:20], msgInvalidKey},
		} {
			for _, path := range []string{"/api/v1/quota/", "/api/v1/status/abc/", "/api/v1/result/abc", "/api/v1/submit/", "/api/v1/validate"} {
				r := h.do("GET", path, "192.0.2.2", "", nil, "Authorization", c.auth)
				wantStatus(t, r, 401)
				if r.json(t)["error"] != c.want || r.Header().Get("X-RateLimit-Limit") != "" {
					t.Fatalf("%s %s: %s", c.name, path, r.Body)
				}
			}
		}
		// Surrounding whitespace in the token is trimmed.
		wantStatus(t, h.do("GET", "/api/v1/quota/", "192.0.2.2", "", nil, "Authorization", "Bearer  "+key+" "), 200)
	})
}

func TestLastUsedThrottled(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		key := h.newKey("192.0.2.3")
		lastUsed := func() string {
			var k store.APIKey
			st.DB.Where("key_hash = ?", store.HashKey(key)).Take(&k)
			if k.LastUsedAt == nil {
				return ""
			}
			return isoformat(*k.LastUsedAt)
		}
		wantStatus(t, h.do("GET", "/api/v1/quota/", "192.0.2.3", key, nil), 200)
		first := lastUsed()
		if first != isoformat(t0) {
			t.Fatalf("last_used_at %q", first)
		}
		h.clock.Set(t0.Add(30e9))
		wantStatus(t, h.do("GET", "/api/v1/quota/", "192.0.2.3", key, nil), 200)
		if lastUsed() != first {
			t.Fatal("last_used_at written twice within a minute")
		}
		h.clock.Set(t0.Add(61e9))
		wantStatus(t, h.do("GET", "/api/v1/quota/", "192.0.2.3", key, nil), 200)
		if lastUsed() != isoformat(t0.Add(61e9)) {
			t.Fatalf("last_used_at not refreshed after a minute: %s", lastUsed())
		}
	})
}
