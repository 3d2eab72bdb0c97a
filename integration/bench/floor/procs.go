package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is the unit of utime and stime in /proc/PID/stat (USER_HZ,
// 100 on every Linux architecture Go runs on).
const clockTicks = 100

// group holds every child process of a run, so that one call kills them
// all whatever way the run ends.
type group struct {
	mu    sync.Mutex
	procs []*proc
	dir   string // where the children's logs go
}

// proc is one child process. A role's stdout (lines) is a protocol of
// single-word lines and its stdin takes commands; a server's stdout and
// stderr go to its log file.
type proc struct {
	name  string
	cmd   *exec.Cmd
	log   string
	stdin io.WriteCloser
	lines chan string   // stdout lines; closed at EOF (roles only)
	done  chan struct{} // closed once the process has exited
}

// start starts bin with args as a child called name. With talk, its stdout
// comes back as lines and its stdin is open for commands.
func (g *group) start(name string, talk bool, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(g.dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Stderr = logf
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	var stdout io.ReadCloser
	if talk {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			logf.Close()
			return nil, err
		}
		if stdout, err = cmd.StdoutPipe(); err != nil {
			logf.Close()
			return nil, err
		}
		p.lines = make(chan string, 64)
	} else {
		cmd.Stdout = logf
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	g.mu.Lock()
	g.procs = append(g.procs, p)
	g.mu.Unlock()
	if talk {
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				p.lines <- sc.Text()
			}
			close(p.lines)
		}()
	}
	go func() {
		cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// killAll kills every child still running and waits for it.
func (g *group) killAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.procs {
		p.cmd.Process.Kill()
	}
	for _, p := range g.procs {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
}

// stop asks p to end (SIGTERM) and kills it after grace.
func (p *proc) stop(grace time.Duration) {
	if p.stdin != nil {
		p.stdin.Close()
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// send writes one command line to p's stdin.
func (p *proc) send(line string) error {
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// expect waits up to within for a line of p's starting with word and
// returns the rest of it.
func (p *proc) expect(ctx context.Context, word string, within time.Duration) (string, error) {
	t := time.NewTimer(within)
	defer t.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				<-p.done
				return "", fmt.Errorf("%s exited (%v) before saying %q; its log:\n%s", p.name, p.cmd.ProcessState, word, tail(p.log))
			}
			if rest, found := strings.CutPrefix(l, word); found {
				return strings.TrimSpace(rest), nil
			}
		case <-t.C:
			return "", fmt.Errorf("%s did not say %q within %v; its log:\n%s", p.name, word, within, tail(p.log))
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// pid is p's process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// tail returns the last lines of the file at path.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "  " + string(bytes.Join(lines, []byte("\n  ")))
}

// cpuTicks returns the user+system CPU time of process pid, all its threads
// together, in clock ticks (fields 14 and 15 of /proc/PID/stat).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return u + s, nil
}

// sample reads the CPU ticks of every process in ps.
func sample(ps []*proc) ([]int64, error) {
	out := make([]int64, len(ps))
	for i, p := range ps {
		t, err := cpuTicks(p.pid())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		out[i] = t
	}
	return out, nil
}

// settle waits, at most within, until the processes ps together used at
// most one clock tick in 300 ms: the work of the setup before a measurement
// (admission, the watch that follows it) is then over.
func settle(ctx context.Context, ps []*proc, within time.Duration) error {
	deadline := time.Now().Add(within)
	prev, err := sample(ps)
	if err != nil {
		return err
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
		cur, err := sample(ps)
		if err != nil {
			return err
		}
		var d int64
		for i := range cur {
			d += cur[i] - prev[i]
		}
		if d <= 1 {
			return nil
		}
		prev = cur
	}
	return nil // busy for another reason (another tenant's load is not ours): go on
}

// freePort returns a TCP port on 127.0.0.1 that nothing listened on a
// moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// loadAvg returns the 1-, 5- and 15-minute load averages of the machine.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
