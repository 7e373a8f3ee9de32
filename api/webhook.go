package api

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/webhook"
)

// newWebhookSecret is a fresh signing secret: "whsec_" and 32 random bytes
// in hex.
func newWebhookSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "whsec_" + hex.EncodeToString(b), nil
}

func (s *Server) webhookAllowPrivate() bool {
	return s.deps.Config != nil && s.deps.Config.WebhookAllowPrivate
}

// submitNotifyURL is a submit's notify URL: its `notifyUrl` field (an empty
// one opts out), else the key's default. A job with one makes sure its key
// has a signing secret. ok is false when an answer was sent.
func (s *Server) submitNotifyURL(c *gin.Context, b *requestBody, k *store.AuthKey) (string, bool) {
	u, present := k.NotifyURL, false
	if b.isJSON {
		if raw, ok := b.json.Fields["notifyUrl"]; ok && string(raw) != "null" {
			present = true
			if err := json.Unmarshal(raw, &u); err != nil {
				abortError(c, http.StatusBadRequest, "notifyUrl must be a string (an http:// or https:// URL).")
				return "", false
			}
		}
	} else if vs, ok := b.form["notifyUrl"]; ok && len(vs) > 0 {
		present, u = true, vs[0]
	}
	u = strings.TrimSpace(u)
	if u == "" {
		return "", true
	}
	if err := webhook.CheckURL(u, s.webhookAllowPrivate()); err != nil {
		msg := err.Error() + "."
		if !present {
			msg = "The key's default notifyUrl is not allowed: " + msg
		}
		abortError(c, http.StatusBadRequest, msg)
		return "", false
	}
	secret, err := newWebhookSecret()
	if err == nil {
		_, _, err = s.deps.Store.KeyWebhook(c.Request.Context(), k.ID, secret)
	}
	if err != nil {
		s.internalError(c, "webhook.secret_failed", err)
		return "", false
	}
	return u, true
}

// webhookBody is /webhook/'s answer.
type webhookBody struct {
	// NotifyURL is the key's default notify URL ("" for none).
	NotifyURL string `json:"notifyUrl"`
	// Secret signs every notice of the key's jobs.
	Secret string `json:"secret"`
	// SignatureHeader names the header that carries the signature.
	SignatureHeader string `json:"signatureHeader"`
}

// webhookSettings answers GET /webhook/ (the key's default notify URL and
// signing secret, made on first use) and POST /webhook/ with a JSON body
// {"notifyUrl": "…", "rotateSecret": true} (either field optional).
func (s *Server) webhookSettings(c *gin.Context) {
	k := authKey(c)
	ctx := c.Request.Context()
	if c.Request.Method == http.MethodPost {
		var req struct {
			NotifyURL    *string `json:"notifyUrl"`
			RotateSecret bool    `json:"rotateSecret"`
		}
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, 16<<10)
		if err := json.NewDecoder(c.Request.Body).Decode(&req); err != nil {
			abortError(c, http.StatusBadRequest, `Send a JSON object: {"notifyUrl": "https://…", "rotateSecret": false}.`)
			return
		}
		if req.NotifyURL != nil {
			u := strings.TrimSpace(*req.NotifyURL)
			if u != "" {
				if err := webhook.CheckURL(u, s.webhookAllowPrivate()); err != nil {
					abortError(c, http.StatusBadRequest, err.Error()+".")
					return
				}
			}
			if err := s.deps.Store.SetKeyNotifyURL(ctx, k.ID, u); err != nil {
				s.internalError(c, "webhook.set_failed", err)
				return
			}
		}
		if req.RotateSecret {
			secret, err := newWebhookSecret()
			if err == nil {
				err = s.deps.Store.RotateWebhookSecret(ctx, k.ID, secret)
			}
			if err != nil {
				s.internalError(c, "webhook.rotate_failed", err)
				return
			}
		}
	}
	secret, err := newWebhookSecret()
	if err != nil {
		s.internalError(c, "webhook.secret_failed", err)
		return
	}
	u, sec, err := s.deps.Store.KeyWebhook(ctx, k.ID, secret)
	if errors.Is(err, store.ErrNotFound) {
		abortError(c, http.StatusUnauthorized, msgInvalidKey)
		return
	}
	if err != nil {
		s.internalError(c, "webhook.read_failed", err)
		return
	}
	c.JSON(http.StatusOK, webhookBody{NotifyURL: u, Secret: sec, SignatureHeader: webhook.SignatureHeader})
}
