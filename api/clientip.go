package api

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// clientIP is the caller's address (kinflow's rule, docs/api.md, "Choices",
// Caller IP): the socket peer, unless the peer is a configured trusted proxy;
// then the X-Forwarded-For entries are read from the right (each proxy
// appends the address it saw), and the first one that is not itself a trusted
// proxy is the caller. Headers from any other peer are ignored, so nobody can
// choose their IP by setting one.
func clientIP(r *http.Request, trusted []netip.Prefix) string {
	peer := peerAddr(r.RemoteAddr)
	if !peer.IsValid() {
		return "0.0.0.0"
	}
	if !inPrefixes(peer, trusted) {
		return peer.String()
	}
	var entries []string
	for _, h := range r.Header.Values("X-Forwarded-For") {
		entries = append(entries, strings.Split(h, ",")...)
	}
	client := peer
	for i := len(entries) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(entries[i]))
		if err != nil {
			// A malformed entry cannot be trusted, nor anything left of it.
			break
		}
		client = a.Unmap()
		if !inPrefixes(client, trusted) {
			break
		}
	}
	return client.String()
}

func peerAddr(remote string) netip.Addr {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr().Unmap()
	}
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

func inPrefixes(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
