// Package freeport hands out TCP ports on 127.0.0.1 for processes that a
// test or a benchmark starts and that bind the port a moment later.
package freeport

import (
	"fmt"
	mrand "math/rand/v2"
	"net"
	"sync"
)

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Port is a TCP port on 127.0.0.1 that was free a moment ago, that this
// process has not handed out before, and that lies below the kernel's
// ephemeral range (20000–32000):
//   - the kernel answers a bind to port 0 with a port it gave a moment ago
//     more often than not within a few hundred binds (CI once started an api
//     on its GPU host's port), so a port is handed out once per process;
//   - an outgoing connection takes its local port from the ephemeral range
//     (32768 and up on Debian), so it never lands on a port handed out here
//     in the moment before the process it is meant for listens on it;
//   - Temporal stores membership ports in a smallint column.
func Port() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	for range 500 {
		p := 20000 + mrand.IntN(12000)
		if given[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		_ = l.Close()
		given[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("no free port in 20000-32000")
}

// Addr is Port as a "127.0.0.1:port" address.
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", p), nil
}
