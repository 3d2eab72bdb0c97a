package shaper_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/shaper-dev/shaper/internal/freeport"
	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
)

// errProxy is a TCP proxy to a NATS server that, when asked, slips a
// protocol error into what the server sends, at a moment the line is idle
// (so not inside a message). nats.go answers an -ERR it does not know by
// closing the connection for good.
type errProxy struct {
	ln     net.Listener
	inject atomic.Bool
	wg     sync.WaitGroup
}

func newErrProxy(t *testing.T, upstream string) *errProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &errProxy{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.wg.Go(func() { io.Copy(u, c); u.Close() })
			p.wg.Go(func() { p.down(u, c); c.Close() })
		}
	})
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

// down copies from the server to the client, and writes the error once
// after 50 ms without traffic once inject is set.
func (p *errProxy) down(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		from.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := from.Read(buf)
		if n > 0 {
			if _, err := to.Write(buf[:n]); err != nil {
				return
			}
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			if p.inject.CompareAndSwap(true, false) {
				if _, err := io.WriteString(to, "-ERR 'injected by the test'\r\n"); err != nil {
					return
				}
			}
			continue
		}
		return
	}
}

// A shaper whose NATS connection is closed for good (nats.go does not
// reconnect after an unknown -ERR) would otherwise answer 503 for ever: Run
// stops with an error instead, so a supervisor starts it again.
func TestRunStopsWhenNATSConnectionIsClosed(t *testing.T) {
	srv := testenv.NATS(t)
	proxy := newErrProxy(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	s, done := runOn(t, "nats://"+proxy.ln.Addr().String())
	waitReady(t, s, done)
	resp, err := http.Post("http://"+s.HTTPAddr()+"/v1/jobs/burst/k", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST before the error = %d, want 202", resp.StatusCode)
	}
	proxy.inject.Store(true)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "nats connection closed") {
			t.Errorf("Run = %v, want an error saying the NATS connection closed", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run still running 20s after its NATS connection was closed")
	}
}

// A shaper started before its NATS server listens (a cluster and its
// shapers brought up together) waits for it, saying so at /readyz, where
// it stopped at once with "no servers available".
func TestRunWaitsForNATSToListen(t *testing.T) {
	port, err := freeport.One()
	if err != nil {
		t.Fatal(err)
	}
	s, done := runOn(t, "nats://127.0.0.1:"+strconv.Itoa(port))
	// Until the server comes, /readyz says what the shaper waits for.
	deadline := time.Now().Add(10 * time.Second)
	for said := ""; !strings.Contains(said, "waiting for NATS at nats://127.0.0.1:"+strconv.Itoa(port)); {
		select {
		case err := <-done:
			t.Fatalf("Run = %v while its NATS server is not yet up, want it to wait", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz said %q, want it waiting for NATS", said)
		}
		if addr := s.HTTPAddr(); addr != "" {
			if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				said = string(b)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	testenv.NATSWith(t, func(o *server.Options) { o.Port = port })
	waitReady(t, s, done)
}

// runOn runs a shaper of burstPolicy on the NATS of url until the test
// ends; Run's result comes on done.
func runOn(t *testing.T, url string) (*shaper.Shaper, <-chan error) {
	t.Helper()
	s, err := shaper.New(shaper.Config{Policies: testenv.Policies(t, burstPolicy), HTTPAddr: "127.0.0.1:0", NATSURL: url})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, finished := make(chan error, 1), make(chan struct{})
	go func() { done <- s.Run(ctx); close(finished) }()
	t.Cleanup(func() { cancel(); <-finished })
	return s, done
}

// waitReady waits up to 20 s for s, run by runOn, to be ready.
func waitReady(t *testing.T, s *shaper.Shaper, done <-chan error) {
	t.Helper()
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run = %v before ready", err)
	case <-time.After(20 * time.Second):
		t.Fatal("shaper not ready after 20s")
	}
}

// A NATS server that stops answering but keeps its connections open (a
// frozen node, SIGSTOP; a path that drops packets) is left for another
// server of the URL list within a few pings: a tour froze one node of
// three and every shaper connected to it answered 503 for the 45 s it
// stayed frozen (nats.go pings every 2 minutes by default).
func TestFrozenServerLeft(t *testing.T) {
	srv := testenv.NATS(t)
	frozen := newProxy(t, srv.Addr().String())
	spare, err := freeport.One() // closed until the first server freezes: the first connection goes to frozen
	if err != nil {
		t.Fatal(err)
	}
	s, done := runOn(t, "nats://"+frozen.addr+",nats://127.0.0.1:"+strconv.Itoa(spare))
	waitReady(t, s, done)
	frozen.freeze()
	froze := time.Now()
	newProxyAt(t, "127.0.0.1:"+strconv.Itoa(spare), srv.Addr().String())
	var code int
	for time.Since(froze) < 20*time.Second {
		resp, err := http.Post("http://"+s.HTTPAddr()+"/v1/jobs/burst/k", "text/plain", strings.NewReader("x"))
		if err == nil {
			code = resp.StatusCode
			resp.Body.Close()
			if code == http.StatusAccepted || code == http.StatusTooManyRequests {
				t.Logf("accepting again %v after the freeze (%d)", time.Since(froze).Round(time.Millisecond), code)
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("20 s after its NATS server froze the shaper still answers %d, want it on the other server within ~6 s", code)
}

// proxy forwards TCP connections to a server until frozen: then it keeps
// them open and forwards nothing more, as a frozen process would.
type proxy struct {
	addr   string
	frozen atomic.Bool
}

func newProxy(t *testing.T, to string) *proxy { return newProxyAt(t, "127.0.0.1:0", to) }

func newProxyAt(t *testing.T, at, to string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", at)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: l.Addr().String()}
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			go p.pipe(in, out)
			go p.pipe(out, in)
		}
	}()
	return p
}

func (p *proxy) freeze() { p.frozen.Store(true) }

func (p *proxy) pipe(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if err != nil {
			return
		}
		for p.frozen.Load() {
			time.Sleep(50 * time.Millisecond) // holds what it read, forwards nothing
		}
		if _, err := to.Write(buf[:n]); err != nil {
			return
		}
	}
}
