package webhook

import (
	"net"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// FuzzCheckURL: CheckURL never panics, allowing private addresses never
// refuses more, and whenever it accepts a URL (private addresses refused)
// whose host is an address, that address is not refused after
// normalisation and the dial hook accepts it too: registration and dialling
// agree. An accepted host carries no zone and is no localhost name.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{
		"https://hooks.example.org/k?x=1",
		"http://[::1%25lo]:8080/x", "http://[fe80::1%25lo]/", "http://[fd00:ec2::254%25eth0]/",
		"http://[::ffff:127.0.0.1]/", "http://[::ffff:0:7f00:1]/", "http://[::127.0.0.1]/",
		"http://[64:ff9b::7f00:1]/", "http://[64:ff9b:1::7f00:1]/", "http://[2002:7f00:1::]/",
		"http://[64:ff9b::a00:1]/", "http://[2002:a9fe:a9fe::]/", "http://[64:ff9b::c0a8:101]/",
		"http://[2001:0:4136:e378::1]/", "http://[2001:db8::1]/", "http://[100::1]/",
		"https://[64:ff9b::808:808]/", "https://[2002:5db8:d822::1]/", "https://[2606:4700::1111]:8443/",
		"http://127.0.0.1%25lo/", "http://localhost./", "http://a.localhost/", "http://192.0.2.1/",
		"http://[::1%25%31]/", "https://u:p@example.org/", "file:///etc/passwd",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		err := CheckURL(raw, false)
		if err != nil {
			return
		}
		if err := CheckURL(raw, true); err != nil {
			t.Fatalf("accepted refusing private addresses, refused allowing them: %v", err)
		}
		u, perr := url.Parse(raw)
		if perr != nil {
			t.Fatalf("accepted an unparsable URL: %v", perr)
		}
		host := u.Hostname()
		if strings.Contains(host, "%") {
			t.Fatalf("accepted a zoned host %q", host)
		}
		if name := strings.ToLower(strings.TrimSuffix(host, ".")); name == "localhost" || strings.HasSuffix(name, ".localhost") {
			t.Fatalf("accepted the name %q", host)
		}
		ip, aerr := netip.ParseAddr(host)
		if aerr != nil {
			return
		}
		v, ok := normalize(ip)
		if !ok || inRefusedRange(v) || Refused(ip) {
			t.Fatalf("accepted %s, which normalises to %v (%v)", ip, v, ok)
		}
		if err := refuseDial("tcp", net.JoinHostPort(host, "443"), nil); err != nil {
			t.Fatalf("accepted %s, which the dial hook refuses: %v", host, err)
		}
	})
}

// FuzzRefused: for the IPv4 address in the last four bytes, each IPv6
// dressing of it (mapped, compatible, translated, NAT64, 6to4 with the
// other bytes as its subnet and host) is refused exactly when it is; a
// zoned address is always refused; and an address is refused exactly when
// what it normalises to is.
func FuzzRefused(f *testing.F) {
	for _, s := range []string{
		"::1", "fe80::1", "fd00:ec2::254", "::ffff:127.0.0.1", "::127.0.0.1", "::ffff:0:7f00:1",
		"64:ff9b::7f00:1", "64:ff9b:1::7f00:1", "2002:7f00:1::", "2002:a9fe:a9fe::1", "64:ff9b::a00:1",
		"64:ff9b::c0a8:101", "2001:0:4136:e378:8000:63bf:3fff:fdd2", "64:ff9b::808:808",
		"2002:5db8:d822::1", "2606:4700::1111", "::", "::ffff:255.255.255.255", "::ffff:192.0.2.1",
	} {
		b := netip.MustParseAddr(s).As16()
		f.Add(b[:], "")
		f.Add(b[:], "lo")
	}
	f.Add(make([]byte, 16), "eth0")
	f.Fuzz(func(t *testing.T, raw []byte, zone string) {
		if len(raw) < 16 {
			raw = append(raw, make([]byte, 16-len(raw))...)
		}
		b := [16]byte(raw[:16])
		a := netip.AddrFrom16(b)

		v4 := netip.AddrFrom4([4]byte(b[12:16]))
		want := Refused(v4)
		forms := wrappedAddrs(v4)
		var sixToFour [16]byte
		copy(sixToFour[:], b[:])
		sixToFour[0], sixToFour[1] = 0x20, 0x02
		copy(sixToFour[2:6], b[12:16])
		forms["6to4 with this subnet and host"] = netip.AddrFrom16(sixToFour)
		for form, w := range forms {
			if Refused(w) != want {
				t.Fatalf("Refused(%s) = %v, Refused(%s) = %v (%s)", v4, want, w, !want, form)
			}
			if zone != "" && !Refused(w.WithZone(zone)) {
				t.Fatalf("%s with zone %q allowed (%s)", w, zone, form)
			}
		}

		if zone != "" && !Refused(a.WithZone(zone)) {
			t.Fatalf("%s with zone %q allowed", a, zone)
		}
		v, ok := normalize(a)
		if !ok {
			t.Fatalf("normalize(%s) refuses an unzoned address", a)
		}
		if Refused(a) != Refused(v) {
			t.Fatalf("Refused(%s) = %v but Refused(%s) = %v", a, Refused(a), v, Refused(v))
		}
		if again, ok := normalize(v); !ok || again != v {
			t.Fatalf("normalize is not idempotent: %s, %s, %s", a, v, again)
		}
	})
}
