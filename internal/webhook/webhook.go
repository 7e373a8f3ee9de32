// Package webhook sends kinflow's job notices: a small JSON POSTed to the
// URL a job (or its key) names, signed with the key's secret the way Stripe
// signs its events, and only to addresses the operator allows.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SignatureHeader carries "t=<unix seconds>,v1=<hex HMAC-SHA256>" of
// "<t>.<body>" under the key's webhook secret.
const SignatureHeader = "Kinflow-Signature"

// DeliveryHeader carries the notice's delivery id (Payload.DeliveryID): the
// same on every attempt to send the same notice, so that a receiver keeps
// the ids it has seen and refuses a retried or replayed notice twice (the
// signature alone passes a replay within its tolerance).
const DeliveryHeader = "Kinflow-Delivery"

// MaxURLLength bounds a notify URL (browsers' practical limit).
const MaxURLLength = 2000

// requestTimeout bounds one delivery attempt: a receiver should answer at
// once and do its work later; a slow one is retried, never waited on.
const requestTimeout = 10 * time.Second

// ErrRefused is a notify URL whose address the operator does not allow.
var ErrRefused = errors.New("notify URL refused: its address is private, loopback or link-local (KINFLOW_WEBHOOK_ALLOW_PRIVATE allows them)")

// Payload is the body of a notice.
type Payload struct {
	// Type is "job.completed" or "job.failed".
	Type string `json:"type"`
	// DeliveryID names this notice, the same on each of its attempts
	// (DeliveryHeader carries it too).
	DeliveryID  string `json:"deliveryId"`
	JobID       string `json:"jobId"`
	Status      string `json:"status"`
	CompletedAt string `json:"completedAt,omitempty"`
	// StatusURL and ResultURL are paths on the API that ran the job.
	StatusURL string  `json:"statusUrl"`
	ResultURL string  `json:"resultUrl,omitempty"`
	Charge    *Charge `json:"charge,omitempty"`
	Synthetic bool    `json:"synthetic,omitempty"`
}

// Charge is what the job cost its key (the status's charge object).
type Charge struct {
	RowsCharged        int `json:"rowsCharged"`
	RowsRefunded       int `json:"rowsRefunded"`
	CachedRowsRefunded int `json:"cachedRowsRefunded"`
}

// Sign is the signature header's value for body sent at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks a signature header against body, accepting timestamps at
// most tolerance from now (replays of old notices fail).
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) bool {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return false
	}
	if d := now.Sub(time.Unix(n, 0)); d > tolerance || d < -tolerance {
		return false
	}
	want := Sign(secret, time.Unix(n, 0), body)
	return hmac.Equal([]byte(want[strings.Index(want, "v1=")+3:]), []byte(sig))
}

// refusedPrefixes are the ranges no notice goes to by default: private,
// shared (carrier-grade NAT), loopback, link-local (cloud metadata at
// 169.254.169.254), unspecified, multicast and the IPv6 unique-local range.
var refusedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
}

// Refused reports whether ip is in a range refused by default.
func Refused(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range refusedPrefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// CheckURL checks a notify URL's form: absolute http or https, a host, no
// credentials, at most MaxURLLength characters; a literal address must be
// allowed. Host names are checked when a notice is sent (after resolution).
func CheckURL(raw string, allowPrivate bool) error {
	if len(raw) > MaxURLLength {
		return fmt.Errorf("notifyUrl is longer than %d characters", MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return errors.New("notifyUrl must be an absolute http:// or https:// URL")
	}
	if u.User != nil {
		return errors.New("notifyUrl must not carry credentials")
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil && !allowPrivate && Refused(ip) {
		return ErrRefused
	}
	if !allowPrivate && strings.EqualFold(u.Hostname(), "localhost") {
		return ErrRefused
	}
	return nil
}

// Client returns the HTTP client of notices: it connects only to allowed
// addresses (checked on the resolved address, so a name that resolves to a
// private one is refused too) and follows no redirect.
func Client(allowPrivate bool) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if !allowPrivate {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || Refused(ap.Addr()) {
				return ErrRefused
			}
			return nil
		}
	}
	return &http.Client{
		Timeout: requestTimeout,
		Transport: &http.Transport{
			Proxy: nil, DialContext: d.DialContext, TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConns: 16, IdleConnTimeout: 30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Send POSTs body to rawURL signed with secret at now, with deliveryID in
// DeliveryHeader (none when empty); an answer other than 2xx is an error.
func Send(ctx context.Context, c *http.Client, rawURL, secret, deliveryID string, body []byte, now time.Time) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("notice request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "kinflow-webhook/1")
	req.Header.Set(SignatureHeader, Sign(secret, now, body))
	if deliveryID != "" {
		req.Header.Set(DeliveryHeader, deliveryID)
	}
	resp, err := c.Do(req)
	if err != nil {
		if errors.Is(err, ErrRefused) {
			return 0, ErrRefused
		}
		return 0, fmt.Errorf("send notice: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("receiver answered HTTP %d", resp.StatusCode)
	}
	return resp.StatusCode, nil
}
