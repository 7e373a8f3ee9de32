package api

import (
	"context"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

func TestWebhookSettingsAndSubmitOption(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "203.0.113.70"
		key := h.newKey(ip)
		ctx := context.Background()

		// The secret is made on first use and stays until rotated.
		r := h.do("GET", "/api/v1/webhook/", ip, key, nil)
		wantStatus(t, r, 200)
		b := r.json(t)
		secret := b["secret"].(string)
		if !strings.HasPrefix(secret, "whsec_") || len(secret) != 70 || b["notifyUrl"] != "" || b["signatureHeader"] != "Kinflow-Signature" {
			t.Fatalf("webhook: %v", b)
		}
		if again := h.do("GET", "/api/v1/webhook", ip, key, nil).json(t)["secret"]; again != secret {
			t.Fatalf("secret changed: %v", again)
		}
		// Private, loopback and link-local addresses are refused by default.
		for _, u := range []string{"http://127.0.0.1:9/hook", "http://10.1.2.3/", "http://169.254.169.254/latest/meta-data", "http://[::1]/", "http://localhost/x", "ftp://example.org/", "example.org/hook"} {
			r := h.submitCSV(ip, key, csvRows(2), "targets", `["kcat"]`, "methods", `{"kcat":"B"}`, "notifyUrl", u)
			wantStatus(t, r, 400)
			if r := h.do("POST", "/api/v1/webhook/", ip, key, jsonBody(t, map[string]any{"notifyUrl": u})); r.Code != 400 {
				t.Fatalf("default %s: %d", u, r.Code)
			}
		}
		// A public URL is kept on the job; JSON bodies take it too.
		r = h.submitCSV(ip, key, csvRows(2), "targets", `["kcat"]`, "methods", `{"kcat":"B"}`, "notifyUrl", "https://hooks.example.org/kinflow")
		wantStatus(t, r, 201)
		j, err := st.Job(ctx, r.json(t)["jobId"].(string))
		if err != nil || j.NotifyURL != "https://hooks.example.org/kinflow" {
			t.Fatalf("job notify URL %q %v", j.NotifyURL, err)
		}
		r = h.submitJSON(ip, key, map[string]any{"data": []map[string]any{{"Protein Sequence": "MKTAYIAKQR", "Substrate": "CCO"}},
			"targets": []string{"kcat"}, "methods": map[string]string{"kcat": "B"}, "notifyUrl": "https://hooks.example.org/json"})
		wantStatus(t, r, 201)
		if j, _ := st.Job(ctx, r.json(t)["jobId"].(string)); j.NotifyURL != "https://hooks.example.org/json" {
			t.Fatalf("JSON notify URL %q", j.NotifyURL)
		}
		// The key's default applies to a submit without the field; an empty
		// field opts out.
		r = h.do("POST", "/api/v1/webhook/", ip, key, jsonBody(t, map[string]any{"notifyUrl": "https://hooks.example.org/default"}))
		wantStatus(t, r, 200)
		if r.json(t)["notifyUrl"] != "https://hooks.example.org/default" {
			t.Fatalf("set default: %s", r.Body)
		}
		id := h.submitted(ip, key)
		if j, _ := st.Job(ctx, id); j.NotifyURL != "https://hooks.example.org/default" {
			t.Fatalf("default notify URL %q", j.NotifyURL)
		}
		r = h.submitCSV(ip, key, csvRows(2), "targets", `["kcat"]`, "methods", `{"kcat":"B"}`, "notifyUrl", "")
		wantStatus(t, r, 201)
		if j, _ := st.Job(ctx, r.json(t)["jobId"].(string)); j.NotifyURL != "" {
			t.Fatalf("opted out, notify URL %q", j.NotifyURL)
		}
		// Rotation makes a new secret.
		r = h.do("POST", "/api/v1/webhook/", ip, key, jsonBody(t, map[string]any{"rotateSecret": true}))
		if s2 := r.json(t)["secret"]; s2 == secret || r.json(t)["notifyUrl"] != "https://hooks.example.org/default" {
			t.Fatalf("rotate: %s", r.Body)
		}
		wantStatus(t, h.do("POST", "/api/v1/webhook/", ip, key, strings.NewReader("nope")), 400)
		wantStatus(t, h.do("GET", "/api/v1/webhook/", ip, "", nil), 401)
	})
}

func TestWebhookPrivateAllowedBySetting(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.WebhookAllowPrivate = true })
		const ip = "203.0.113.71"
		key := h.newKey(ip)
		r := h.submitCSV(ip, key, csvRows(2), "targets", `["kcat"]`, "methods", `{"kcat":"B"}`, "notifyUrl", "http://127.0.0.1:9/hook")
		wantStatus(t, r, 201)
		// The job's key got a secret at submit.
		if _, sec, err := st.KeyWebhook(context.Background(), authKeyID(t, st, ip), ""); err != nil || sec == "" {
			t.Fatalf("secret %q %v", sec, err)
		}
	})
}
