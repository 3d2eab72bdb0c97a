// Package freeport hands tests and benchmarks TCP ports on 127.0.0.1 for
// processes they start later.
//
// A port taken by listening on port 0 comes from the kernel's ephemeral
// range, the range every outgoing connection's local port also comes
// from: between closing that listener and the child binding the port, a
// connection of any process on the machine (a load generator, a NATS
// client) may take it, and the child fails with "address already in use".
// The ports handed out here lie outside that range, where the kernel never
// picks one of its own accord, and no port is handed out twice by one
// process.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Lowest port handed out: below it lie well-known services' ports.
const floor = 10000

var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// Take returns n distinct ports on 127.0.0.1 that nothing listens on, each
// outside the kernel's ephemeral range and not handed out before by this
// process.
func Take(n int) ([]int, error) {
	lo, hi := span()
	return takeIn(lo, hi, n)
}

// takeIn is Take over the ports lo to hi.
func takeIn(lo, hi, n int) ([]int, error) {
	mu.Lock()
	defer mu.Unlock()
	ports := make([]int, 0, n)
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	width := hi - lo + 1
	start := rand.IntN(width)
	for i := 0; i < width && len(ports) < n; i++ {
		p := lo + (start+i)%width
		if handed[p] {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		lns = append(lns, ln)
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("free port: only %d of %d ports free in %d-%d", len(ports), n, lo, hi)
	}
	for _, p := range ports {
		handed[p] = true
	}
	return ports, nil
}

// One returns one port as Take does.
func One() (int, error) {
	p, err := Take(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// span is the range ports are handed out from: below the ephemeral range
// when there is room for one, else above it.
func span() (lo, hi int) {
	elo, ehi := ephemeral()
	if elo-1-floor >= 1000 {
		return floor, elo - 1
	}
	if 65535-ehi >= 1000 {
		return ehi + 1, 65535
	}
	// No room outside it: take from the whole range and rely on the
	// bind check alone.
	return floor, 65535
}

// ephemeral reads the kernel's ephemeral port range, Linux's default when
// it cannot.
func ephemeral() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || l < 1 || h < l || h > 65535 {
		return lo, hi
	}
	return l, h
}
