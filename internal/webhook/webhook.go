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
var ErrRefused = errors.New("notify URL refused: its address is private, loopback, link-local or otherwise not public (KINFLOW_WEBHOOK_ALLOW_PRIVATE allows them)")

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
// 169.254.169.254), unspecified, multicast, reserved (240/4 with the
// broadcast 255.255.255.255), IETF protocol assignments, documentation and
// benchmarking, the IPv6 discard and unique-local ranges, and two IPv6
// ranges that carry an IPv4 address in a way that cannot be checked:
// Teredo (server and inverted client address both embedded, reached through
// a relay) and the local-use NAT64 prefix (its operator may embed the IPv4
// at any RFC 6052 length, so there is no one place to read it from).
// Forms whose embedded IPv4 is at a fixed place are unwrapped by normalize
// and that IPv4 is checked instead.
var refusedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"), // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"), // documentation (TEST-NET-1)
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation (TEST-NET-2)
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation (TEST-NET-3)
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"), // reserved, and 255.255.255.255
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("100::/64"),       // discard
	netip.MustParsePrefix("2001::/32"),      // Teredo
	netip.MustParsePrefix("2001:db8::/32"),  // documentation
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
}

// The IPv6 forms that carry an IPv4 address at a fixed place; a packet to
// one may end up at that IPv4 (through the host's own stack, a translator
// or a tunnel), so it is that IPv4 that is checked.
var (
	// IPv4-compatible, ::a.b.c.d (deprecated); :: and ::1 themselves are
	// the unspecified and loopback addresses and stay as they are.
	compatPrefix = netip.MustParsePrefix("::/96")
	// IPv4-translated (SIIT), ::ffff:0:a.b.c.d.
	translatedPrefix = netip.MustParsePrefix("::ffff:0:0:0/96")
	// The well-known NAT64 prefix, 64:ff9b::a.b.c.d.
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	// 6to4, 2002:aabb:ccdd::/48 for a.b.c.d (bits 16 to 47).
	sixToFourPrefix = netip.MustParsePrefix("2002::/16")
)

// normalize returns the address ip is checked as: the IPv4 address it
// carries when it is an IPv4-mapped, IPv4-compatible, IPv4-translated, NAT64
// (64:ff9b::/96) or 6to4 address, else ip itself. ok is false for an address
// that is refused whatever it is: an invalid one, or one with a zone. A zone
// names the interface of a scoped address (link-local, or a private address
// on one link), which a public receiver never needs; and a zoned address is
// in no netip.Prefix, so no range check could ever see it.
func normalize(ip netip.Addr) (v netip.Addr, ok bool) {
	if !ip.IsValid() || ip.Zone() != "" {
		return netip.Addr{}, false
	}
	if ip.Is4() {
		return ip, true
	}
	if ip.Is4In6() {
		return ip.Unmap(), true
	}
	b := ip.As16()
	switch {
	case compatPrefix.Contains(ip) && ip != netip.IPv6Unspecified() && ip != netip.IPv6Loopback(),
		translatedPrefix.Contains(ip), nat64Prefix.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFourPrefix.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return ip, true
}

// Refused reports whether ip is refused by default: it is invalid or has a
// zone, or it or the IPv4 address it carries (see normalize) is in a
// refused range. An IPv6 form of a public IPv4 address is as allowed as
// that address.
func Refused(ip netip.Addr) bool {
	v, ok := normalize(ip)
	if !ok {
		return true
	}
	return inRefusedRange(ip) || inRefusedRange(v)
}

func inRefusedRange(ip netip.Addr) bool {
	for _, p := range refusedPrefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// CheckURL checks a notify URL's form: absolute http or https, a host, no
// credentials, at most MaxURLLength characters. Unless allowPrivate, a
// literal address must not be Refused, a host must carry no zone, and the
// names localhost and *.localhost (RFC 6761) are refused. Other host names
// are checked when a notice is sent, on each address dialled (Client).
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
	if allowPrivate {
		return nil
	}
	// Hostname is decoded: [::1%25lo] is "::1%lo", which ParseAddr reads
	// as ::1 with zone lo.
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if Refused(ip) {
			return ErrRefused
		}
		return nil
	}
	// A zone on anything that is not an IPv6 literal (url.Parse lets
	// 127.0.0.1%25lo through as a host name): no real name has one.
	if strings.Contains(host, "%") {
		return ErrRefused
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return ErrRefused
	}
	return nil
}

// refuseDial is the Control hook of the notice dialer: it runs on every
// address the dialer connects to, after any name resolution and for each
// address tried, so neither a name nor an IPv6 dressing of an address
// reaches a refused one.
func refuseDial(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || Refused(ap.Addr()) {
		return ErrRefused
	}
	return nil
}

// Client returns the HTTP client of notices: unless allowPrivate, it
// connects only to addresses that are not Refused (checked on the dialled
// address, so a name that resolves to a refused one is refused too), and it
// uses no proxy and follows no redirect.
func Client(allowPrivate bool) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if !allowPrivate {
		d.Control = refuseDial
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
