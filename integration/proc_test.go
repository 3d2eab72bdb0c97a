package integration

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/freeport"
)

// proc is a process started by a test. It is killed when the test ends, and
// its output (stdout and stderr) is kept when the test fails (logOutput).
// Its methods are safe for concurrent use.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{} // closed when the process has exited
	err  error         // cmd.Wait's error, set before done closes
}

// startProc starts bin with args and env added to the test's environment
// (minus any SHAPER_* variable, so the caller's shell cannot change a test).
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &tailBuffer{max: 256 << 10}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SHAPER_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = procAttr()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			logOutput(t, name, fmt.Sprintf("pid %d, %s", p.pid(), p.state()), p.out.String())
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) state() string {
	if !p.exited() {
		return "running"
	}
	return p.cmd.ProcessState.String()
}

// kill sends SIGKILL and waits until the process has exited; it does
// nothing to an exited process.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = syscall.Kill(p.pid(), syscall.SIGKILL)
	<-p.done
}

// wait waits at most d for the process to exit and returns its exit code,
// or -1 and false when it is still running.
func (p *proc) wait(d time.Duration) (int, bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), true
	case <-time.After(d):
		return -1, false
	}
}

// tailBuffer keeps the last max bytes written to it. It trims what it holds
// only when that reaches twice max, so that a write costs no more than its
// own length however chatty the process (a shaper at --log-level debug). It
// is safe for concurrent use.
type tailBuffer struct {
	mu      sync.Mutex
	max     int
	b       []byte
	dropped int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b = append(b.b, p...)
	if len(b.b) > 2*b.max {
		over := len(b.b) - b.max
		b.b = append(b.b[:0], b.b[over:]...)
		b.dropped += over
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	tail, dropped := b.b, b.dropped
	if over := len(tail) - b.max; over > 0 {
		tail, dropped = tail[over:], dropped+over
	}
	if dropped > 0 {
		return fmt.Sprintf("[%d bytes dropped]\n%s", dropped, tail)
	}
	return string(tail)
}

// freePorts returns n distinct free TCP ports on 127.0.0.1, outside the
// range outgoing connections take theirs from (see package freeport).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports, err := freeport.Take(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}
