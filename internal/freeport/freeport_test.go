package freeport

import (
	"net"
	"strconv"
	"testing"
)

// The ports are distinct, bindable, outside the ephemeral range, and never
// handed out twice.
func TestTake(t *testing.T) {
	elo, ehi := ephemeral()
	seen := map[int]bool{}
	for range 20 {
		ports, err := Take(5)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
			if elo-1-floor >= 1000 && p >= elo && p <= ehi {
				t.Fatalf("port %d is in the ephemeral range %d-%d", p, elo, ehi)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				t.Fatalf("port %d: %v", p, err)
			}
			ln.Close()
		}
	}
}

// A port something listens on is never handed out, and asking for more
// ports than are free is an error.
func TestTakeSkipsBoundPorts(t *testing.T) {
	lo, err := One()
	if err != nil {
		t.Fatal(err)
	}
	hi := lo + 9
	// Hold every port of lo..hi but the first two that are free.
	var free []int
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	for p := lo; p <= hi; p++ {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		if len(free) < 2 {
			ln.Close()
			free = append(free, p)
			continue
		}
		held = append(held, ln)
	}
	if len(free) < 2 {
		t.Fatalf("fewer than two free ports in %d-%d", lo, hi)
	}
	mu.Lock()
	delete(handed, free[0]) // lo was handed out above
	mu.Unlock()
	if _, err := takeIn(lo, hi, 3); err == nil {
		t.Fatalf("three ports handed out of %d-%d with two free", lo, hi)
	}
	got, err := takeIn(lo, hi, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !(got[0] == free[0] && got[1] == free[1] || got[0] == free[1] && got[1] == free[0]) {
		t.Fatalf("got %v, want %v", got, free)
	}
	if _, err := takeIn(lo, hi, 1); err == nil {
		t.Fatalf("a port handed out twice")
	}
}
