package webhook

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	body := []byte(`{"jobId":"x"}`)
	now := time.Unix(1764100000, 0)
	h := Sign("whsec_s", now, body)
	if !strings.HasPrefix(h, "t=1764100000,v1=") || len(h) != len("t=1764100000,v1=")+64 {
		t.Fatalf("header %q", h)
	}
	if !Verify("whsec_s", h, body, now.Add(time.Minute), 5*time.Minute) {
		t.Fatal("a valid signature fails")
	}
	for name, ok := range map[string]bool{
		"other secret": Verify("whsec_t", h, body, now, 5*time.Minute),
		"other body":   Verify("whsec_s", h, []byte(`{"jobId":"y"}`), now, 5*time.Minute),
		"too old":      Verify("whsec_s", h, body, now.Add(10*time.Minute), 5*time.Minute),
		"no v1":        Verify("whsec_s", "t=1764100000", body, now, 5*time.Minute),
	} {
		if ok {
			t.Errorf("%s verifies", name)
		}
	}
}

func TestRefusedRanges(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "10.0.0.8", "172.16.5.4", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "::1", "fe80::1", "fd00::1", "::ffff:127.0.0.1", "224.0.0.1"} {
		if !Refused(netip.MustParseAddr(a)) {
			t.Errorf("%s allowed", a)
		}
	}
	for _, a := range []string{"93.184.216.34", "8.8.8.8", "2606:4700::1111", "172.32.0.1"} {
		if Refused(netip.MustParseAddr(a)) {
			t.Errorf("%s refused", a)
		}
	}
	if err := CheckURL("https://hooks.example.org/k?x=1", false); err != nil {
		t.Errorf("public URL: %v", err)
	}
	if err := CheckURL("http://127.0.0.1:8000/", true); err != nil {
		t.Errorf("allowed private: %v", err)
	}
	for _, u := range []string{"http://127.0.0.1/", "http://localhost:80/", "file:///etc/passwd", "https://user:pw@example.org/", "//example.org", strings.Repeat("a", 2001)} {
		if CheckURL(u, false) == nil {
			t.Errorf("%s accepted", u)
		}
	}
}

// TestClientRefusesLoopbackAfterResolution: the address is checked when
// connecting, so a URL whose host is a name is refused too.
func TestClientRefusesLoopbackAfterResolution(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer srv.Close()
	url := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	_, err := Send(context.Background(), Client(false), url, "s", "", []byte("{}"), time.Now())
	if !errors.Is(err, ErrRefused) || hits != 0 {
		t.Fatalf("err %v, hits %d", err, hits)
	}
	// Allowed by the setting: delivered, signed.
	var got http.Header
	var body []byte
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, body = r.Header.Clone(), nil
		body, _ = io.ReadAll(r.Body)
	})
	code, err := Send(context.Background(), Client(true), url, "s", "dlv_1", []byte(`{"a":1}`), time.Now())
	if err != nil || code != 200 || !Verify("s", got.Get(SignatureHeader), body, time.Now(), time.Minute) || got.Get(DeliveryHeader) != "dlv_1" {
		t.Fatalf("allowed: %d %v %v", code, err, got)
	}
	// A non-2xx answer is an error (retried by the activity).
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) })
	if code, err := Send(context.Background(), Client(true), url, "s", "", nil, time.Now()); err == nil || code != 503 {
		t.Fatalf("503: %d %v", code, err)
	}
}

// TestNormalize: each IPv6 form that carries an IPv4 address at a fixed
// place is checked as that IPv4; a zoned or invalid address is not judged
// at all (refused).
func TestNormalize(t *testing.T) {
	for _, c := range []struct {
		in, want string // want "" when refused outright
	}{
		{"127.0.0.1", "127.0.0.1"},
		{"2606:4700::1111", "2606:4700::1111"},
		{"::ffff:127.0.0.1", "127.0.0.1"}, // IPv4-mapped
		{"::127.0.0.1", "127.0.0.1"},      // IPv4-compatible
		{"::8.8.8.8", "8.8.8.8"},          // IPv4-compatible, public
		{"::", "::"},                      // unspecified, not 0.0.0.0
		{"::1", "::1"},                    // loopback, not 0.0.0.1
		{"::ffff:0:7f00:1", "127.0.0.1"},  // IPv4-translated (SIIT)
		{"64:ff9b::7f00:1", "127.0.0.1"},  // NAT64
		{"64:ff9b::808:808", "8.8.8.8"},   // NAT64, public
		{"2002:7f00:1::", "127.0.0.1"},    // 6to4
		{"2002:a9fe:a9fe:1:2::3", "169.254.169.254"},
		{"2002:5db8:d822::1", "93.184.216.34"},
		{"2001::1", "2001::1"},                     // Teredo: refused by range, not unwrapped
		{"64:ff9b:1::7f00:1", "64:ff9b:1::7f00:1"}, // local-use NAT64: likewise
		{"::1%lo", ""},
		{"fe80::1%eth0", ""},
		{"::ffff:8.8.8.8%lo", ""},
		{"2606:4700::1111%eth0", ""},
	} {
		got, ok := normalize(netip.MustParseAddr(c.in))
		if c.want == "" {
			if ok {
				t.Errorf("normalize(%s) = %s, want refused outright", c.in, got)
			}
			continue
		}
		if !ok || got != netip.MustParseAddr(c.want) {
			t.Errorf("normalize(%s) = %v, %v; want %s", c.in, got, ok, c.want)
		}
	}
	if _, ok := normalize(netip.Addr{}); ok {
		t.Error("the zero Addr is judged")
	}
}

// wrappedAddrs are the ways an IPv4 address can be dressed as IPv6 in a
// notify URL or a dialled address, each by name.
func wrappedAddrs(v netip.Addr) map[string]netip.Addr {
	b := v.As4()
	return map[string]netip.Addr{
		"mapped":     netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}),
		"compatible": netip.AddrFrom16([16]byte{12: b[0], 13: b[1], 14: b[2], 15: b[3]}),
		"translated": netip.AddrFrom16([16]byte{8: 0xff, 9: 0xff, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}),
		"nat64":      netip.AddrFrom16([16]byte{1: 0x64, 2: 0xff, 3: 0x9b, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}),
		"6to4":       netip.AddrFrom16([16]byte{0: 0x20, 1: 0x02, 2: b[0], 3: b[1], 4: b[2], 5: b[3], 15: 1}),
	}
}

// TestRefusedWrappedForms: every IPv6 dressing of a refused IPv4 address is
// refused, and every dressing of a public one is as allowed as the address
// itself. The decision, per form, for a public IPv4 inside:
//
//	form                          refused?  why
//	::ffff:a.b.c.d (mapped)       no        the host's stack sends it to a.b.c.d
//	::a.b.c.d (compatible)        no        deprecated; reaches a.b.c.d if anything
//	::ffff:0:a.b.c.d (translated) no        a SIIT translator sends it to a.b.c.d
//	64:ff9b::a.b.c.d (NAT64)      no        the NAT64 gateway sends it to a.b.c.d
//	2002:aabb:ccdd::/48 (6to4)    no        the tunnel ends at a.b.c.d
//	2001::/32 (Teredo)            yes       always: server and client both embedded
//	64:ff9b:1::/48 (local NAT64)  yes       always: the IPv4's place depends on the operator
//
// and any of them with a zone is refused.
func TestRefusedWrappedForms(t *testing.T) {
	for _, c := range []struct {
		v4      string
		refused bool
	}{
		{"127.0.0.1", true}, {"10.1.2.3", true}, {"169.254.169.254", true},
		{"192.168.0.10", true}, {"172.16.0.1", true}, {"100.64.0.1", true},
		{"0.0.0.0", true}, {"0.0.0.1", true}, {"224.0.0.1", true}, {"255.255.255.255", true},
		{"192.0.0.8", true}, {"192.0.2.1", true}, {"198.18.0.1", true}, {"198.19.255.255", true},
		{"198.51.100.7", true}, {"203.0.113.9", true},
		{"8.8.8.8", false}, {"93.184.216.34", false}, {"1.1.1.1", false},
		{"172.32.0.1", false}, {"198.20.0.1", false}, {"192.0.3.1", false},
	} {
		v := netip.MustParseAddr(c.v4)
		if Refused(v) != c.refused {
			t.Errorf("Refused(%s) = %v", v, !c.refused)
		}
		for form, a := range wrappedAddrs(v) {
			if Refused(a) != c.refused {
				t.Errorf("Refused(%s) = %v (%s of %s)", a, !c.refused, form, v)
			}
			if !Refused(a.WithZone("lo")) {
				t.Errorf("%s%%lo allowed (%s of %s with a zone)", a, form, v)
			}
		}
	}
	for _, a := range []string{
		"::1%lo", "fe80::1%lo", "fd00:ec2::254%eth0", "2606:4700::1111%eth0", "::ffff:8.8.8.8%lo",
		"2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001::", // Teredo
		"64:ff9b:1::7f00:1", "64:ff9b:1:7f00:0:100::", "64:ff9b:1::808:808", // local-use NAT64
		"100::1", "100::ffff:ffff:ffff:ffff", // discard
		"2001:db8::1", "2001:db8:ffff::1", // documentation
		"::", "::1", "fd00:ec2::254", "fe80::1", "ff02::1",
	} {
		if !Refused(netip.MustParseAddr(a)) {
			t.Errorf("%s allowed", a)
		}
	}
	for _, a := range []string{"2606:4700::1111", "2a00:1450:4001::200e", "100:0:0:1::1", "2001:db9::1", "2001:1::1"} {
		if Refused(netip.MustParseAddr(a)) {
			t.Errorf("%s refused", a)
		}
	}
}

// TestCheckURLRefusesDressedAddresses: a notify URL whose literal host is a
// refused address in any dressing (a zone, a wrapped IPv4) is refused at
// registration; the same URL is accepted when private addresses are allowed.
func TestCheckURLRefusesDressedAddresses(t *testing.T) {
	refused := []string{
		"http://[::1%25lo]:8080/x",
		"http://[::1%25eth0]/",
		"http://[fe80::1%25lo]/",
		"http://[fd00:ec2::254%25eth0]/",
		"http://[fd00:ec2::254]/",
		"https://[2606:4700::1111%25eth0]/", // public, but zoned
		"http://[::ffff:127.0.0.1]/",
		"http://[::ffff:7f00:1]/",
		"http://[::ffff:127.0.0.1%25lo]/",
		"http://[::127.0.0.1]/",
		"http://[::ffff:0:7f00:1]/",
		"http://[64:ff9b::7f00:1]/",
		"http://[64:ff9b::127.0.0.1]:9000/",
		"http://[64:ff9b:1::7f00:1]/",
		"http://[2002:7f00:1::]/",
		"http://[2002:7f00:1:1234::5]/",
		"http://[64:ff9b::a00:1]/",      // NAT64 of 10.0.0.1
		"http://[2002:a00:1::]/",        // 6to4 of 10.0.0.1
		"http://[64:ff9b::a9fe:a9fe]/",  // NAT64 of 169.254.169.254
		"http://[2002:a9fe:a9fe::]/",    // 6to4 of 169.254.169.254
		"http://[::ffff:0:a9fe:a9fe]/",  // translated 169.254.169.254
		"http://[64:ff9b::c0a8:101]/",   // NAT64 of 192.168.1.1
		"http://[2002:c0a8:101::1]/",    // 6to4 of 192.168.1.1
		"http://[2001:0:4136:e378::1]/", // Teredo
		"http://[2001:db8::1]/",         // documentation
		"http://[100::1]/",              // discard
		"http://192.0.2.10/", "http://198.51.100.1/", "http://203.0.113.1/", "http://198.18.0.1/",
		"http://192.0.0.170/", "http://255.255.255.255/",
		"http://127.0.0.1%25lo/", // a zone on an IPv4, which url.Parse passes as a name
		"http://example.org%25eth0/",
	}
	for _, u := range refused {
		if err := CheckURL(u, false); !errors.Is(err, ErrRefused) {
			t.Errorf("CheckURL(%s) = %v, want ErrRefused", u, err)
		}
		if err := CheckURL(u, true); err != nil {
			t.Errorf("CheckURL(%s) allowing private: %v", u, err)
		}
	}
	for _, u := range []string{
		"https://[64:ff9b::808:808]/hook",  // NAT64 of 8.8.8.8
		"https://[2002:5db8:d822::1]/hook", // 6to4 of 93.184.216.34
		"https://[::ffff:93.184.216.34]/",  // mapped public
		"https://[::ffff:0:5db8:d822]/",    // translated public
		"https://[2606:4700::1111]:8443/",
		"https://93.184.216.34/",
	} {
		if err := CheckURL(u, false); err != nil {
			t.Errorf("CheckURL(%s) = %v", u, err)
		}
	}
}

// TestCheckURLReadsZonedHostAsAddress: url.Parse decodes the %25 of a
// bracketed host's zone, and netip.ParseAddr accepts the zone, so the
// host is judged as an address, not passed through as a name.
func TestCheckURLReadsZonedHostAsAddress(t *testing.T) {
	u, err := url.Parse("http://[::1%25lo]:8080/x")
	if err != nil {
		t.Fatal(err)
	}
	if u.Hostname() != "::1%lo" {
		t.Fatalf("Hostname %q", u.Hostname())
	}
	ip, err := netip.ParseAddr(u.Hostname())
	if err != nil || ip.Zone() != "lo" || ip.WithZone("") != netip.IPv6Loopback() {
		t.Fatalf("ParseAddr: %v %v", ip, err)
	}
}

// TestCheckURLLocalhostNames: localhost and the names under it (RFC 6761)
// are refused, in any case and with a trailing dot; names that merely
// contain the word are not.
func TestCheckURLLocalhostNames(t *testing.T) {
	for _, u := range []string{"http://localhost/", "http://LocalHost:81/", "http://localhost./", "http://api.localhost/",
		"http://a.b.LOCALHOST:9/x", "http://evil.localhost./"} {
		if err := CheckURL(u, false); !errors.Is(err, ErrRefused) {
			t.Errorf("CheckURL(%s) = %v, want ErrRefused", u, err)
		}
		if err := CheckURL(u, true); err != nil {
			t.Errorf("CheckURL(%s) allowing private: %v", u, err)
		}
	}
	for _, u := range []string{"https://localhost.example.org/", "https://notlocalhost/", "https://mylocalhost.example/", "https://localhostx/"} {
		if err := CheckURL(u, false); err != nil {
			t.Errorf("CheckURL(%s) = %v", u, err)
		}
	}
}

// TestRefuseDialHook: the dialer's Control hook, on the "ip:port" strings
// the dialer hands it, refuses zoned and wrapped refused addresses and
// anything it cannot parse.
func TestRefuseDialHook(t *testing.T) {
	for _, c := range []struct {
		address string
		ok      bool
	}{
		{"[::1%lo]:80", false},
		{"[::1%1]:80", false},
		{"[fe80::1%eth0]:443", false},
		{"[fd00:ec2::254%eth0]:80", false},
		{"[2606:4700::1111%eth0]:443", false},
		{"[::ffff:127.0.0.1]:80", false},
		{"[::ffff:127.0.0.1%lo]:80", false},
		{"[::127.0.0.1]:80", false},
		{"[::ffff:0:7f00:1]:80", false},
		{"[64:ff9b::7f00:1]:80", false},
		{"[64:ff9b::a9fe:a9fe]:80", false},
		{"[64:ff9b:1::7f00:1]:80", false},
		{"[2002:7f00:1::]:80", false},
		{"[2002:a00:1::]:80", false},
		{"[2001:0:4136:e378::1]:80", false},
		{"[::1]:80", false},
		{"127.0.0.1:80", false},
		{"169.254.169.254:80", false},
		{"127.0.0.1%lo:80", false},
		{"localhost:80", false},
		{"", false},
		{"8.8.8.8:443", true},
		{"[2606:4700::1111]:443", true},
		{"[64:ff9b::808:808]:443", true},
		{"[2002:5db8:d822::1]:443", true},
		{"[::ffff:8.8.8.8]:443", true},
	} {
		err := refuseDial("tcp", c.address, nil)
		if c.ok && err != nil {
			t.Errorf("%q refused: %v", c.address, err)
		}
		if !c.ok && !errors.Is(err, ErrRefused) {
			t.Errorf("%q: %v, want ErrRefused", c.address, err)
		}
	}
}

// TestClientRefusesDressedLoopback: a real receiver on the loopback is
// never reached by Client(false) through a zoned or an IPv4-mapped form of
// its address, and is reached through both by Client(true).
func TestClientRefusesDressedLoopback(t *testing.T) {
	var hits atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	v4 := httptest.NewServer(h)
	defer v4.Close()
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	v6 := httptest.NewUnstartedServer(h)
	v6.Listener.Close()
	v6.Listener = ln
	v6.Start()
	defer v6.Close()
	lo := loopbackInterface(t)
	urls := []string{
		"http://[::1%25" + lo + "]:" + port(t, v6.URL) + "/",
		"http://[::ffff:127.0.0.1]:" + port(t, v4.URL) + "/",
		"http://[::ffff:7f00:1]:" + port(t, v4.URL) + "/",
	}
	for _, u := range urls {
		hits.Store(0)
		if _, err := Send(context.Background(), Client(false), u, "s", "", []byte("{}"), time.Now()); !errors.Is(err, ErrRefused) || hits.Load() != 0 {
			t.Errorf("Client(false) %s: err %v, hits %d", u, err, hits.Load())
		}
		if code, err := Send(context.Background(), Client(true), u, "s", "", []byte("{}"), time.Now()); err != nil || code != 200 || hits.Load() != 1 {
			t.Errorf("Client(true) %s: %d %v, hits %d", u, code, err, hits.Load())
		}
	}
}

// loopbackInterface is the name of the machine's loopback interface ("lo"
// on Linux), the zone a zoned ::1 names.
func loopbackInterface(t *testing.T) string {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 && i.Flags&net.FlagUp != 0 {
			return i.Name
		}
	}
	t.Skip("no loopback interface")
	return ""
}

func port(t *testing.T, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}
