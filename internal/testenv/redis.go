package testenv

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/freeport"
)

// RedisInstallCommand is the command that installs the redis-server binary
// the tests need on Debian and Ubuntu.
const RedisInstallCommand = "apt-get install redis-server"

// Redis starts a redis-server process on a free 127.0.0.1 port, without
// persistence, and returns its address "127.0.0.1:N". The process is killed
// when the test ends. A missing redis-server is installed with apt-get when
// the test runs as root; otherwise the test fails with the install command.
func Redis(t testing.TB) string {
	t.Helper()
	return StartRedis(t).Addr()
}

// RedisServer is a redis-server process owned by a test. Stop and Start
// let a test take Redis away and bring it back on the same address; data
// does not survive a restart. Its methods are safe for concurrent use.
type RedisServer struct {
	t    testing.TB
	bin  string
	port int
	dir  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartRedis is Redis returning the server, so the test can stop and
// restart it. The process is killed when the test ends.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	bin := redisBinary(t)
	s := &RedisServer{t: t, bin: bin, dir: t.TempDir()}
	t.Cleanup(s.Stop)
	var err error
	for range 5 { // another process may take the free port before redis binds it
		s.port, err = freePort()
		if err != nil {
			continue
		}
		if err = s.start(); err == nil {
			return s
		}
	}
	t.Fatalf("testenv: redis-server: %v", err)
	return nil
}

// Addr returns the "127.0.0.1:N" address the server listens on, the same
// across restarts.
func (s *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Stop kills the server and waits until it has exited. Stopping a stopped
// server does nothing.
func (s *RedisServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd, s.done = nil, nil
}

// Start starts a stopped server again on the same address and waits until
// it answers PING; it fails the test if it cannot. Starting a running
// server does nothing.
func (s *RedisServer) Start() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("testenv: restart redis-server: %v", err)
	}
}

func (s *RedisServer) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	var out bytes.Buffer
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--loglevel", "warning",
	)
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ping(s.Addr()) == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("exited before answering PING on %s: %s", s.Addr(), bytes.TrimSpace(out.Bytes()))
		case <-time.After(20 * time.Millisecond):
		}
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("not answering PING on %s: %s", s.Addr(), bytes.TrimSpace(out.Bytes()))
}

// ping sends PING over a fresh connection and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func freePort() (int, error) { return freeport.One() }

// redisBinary finds redis-server, installing it with apt-get when running
// as root, and fails the test with the install command otherwise.
func redisBinary(t testing.TB) string {
	t.Helper()
	p, installed := aptBinary(t, []string{"redis-server"}, RedisInstallCommand, "redis-server")
	if installed {
		// The Debian package may start its own service on 6379; the tests
		// use their own ports, so it does not compete with them. Stop it
		// anyway where a service manager is present, best effort.
		_ = exec.Command("service", "redis-server", "stop").Run()
	}
	return p
}
