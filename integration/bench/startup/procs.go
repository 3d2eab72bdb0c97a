package main

import (
	"bytes"
	"errors"
	"fmt"
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

// proc is one child process, its stdout and stderr in its log file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	log     string
	started time.Time     // just before the process was started
	done    chan struct{} // closed once the process has exited
}

// start starts bin with args as a child called name.
func (g *group) start(name, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(g.dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Stdout, cmd.Stderr = logf, logf
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	g.mu.Lock()
	g.procs = append(g.procs, p)
	g.mu.Unlock()
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

// stop asks p to end (SIGTERM) and kills it after grace; it reports
// whether p ended by itself.
func (p *proc) stop(grace time.Duration) bool {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
		return false
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

// cpuSeconds returns the user+system CPU time of process pid, all its
// threads together (fields 14 and 15 of /proc/PID/stat).
func cpuSeconds(pid int) (float64, error) {
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
	return float64(u+s) / clockTicks, nil
}

// memory returns the resident set of process pid and its peak, in bytes
// (VmRSS and VmHWM of /proc/PID/status).
func memory(pid int) (rss, peak float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for l := range strings.Lines(string(b)) {
		name, v, ok := strings.Cut(l, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, name, err)
		}
		if name == "VmRSS" {
			rss = kb * 1024
		} else {
			peak = kb * 1024
		}
	}
	if rss == 0 || peak == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS or VmHWM", pid)
	}
	return rss, peak, nil
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
