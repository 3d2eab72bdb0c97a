// Package benchkit is what the benchmark programs under integration/bench
// share: their children (started in a group that one call kills, each
// logging to a file of its own), the CPU time and memory of a process read
// from /proc, free ports, the binaries built from the module, a shaper
// serve of their own, the run's set-up and clean-up, and the table they
// print.
package benchkit

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Group holds every child process of a run, so that one call kills them
// all whatever way the run ends.
type Group struct {
	mu    sync.Mutex
	procs []*Proc
	dir   string // where the children's logs go
}

// NewGroup returns a group whose children log into dir.
func NewGroup(dir string) *Group { return &Group{dir: dir} }

// Proc is one child process. Its stderr goes to its log file, and so does
// its stdout, but for a role's (StartRole): that is a protocol of
// single-word lines (Expect), and its stdin takes commands (Send).
type Proc struct {
	Name    string
	Log     string    // the log file's path
	Started time.Time // just before the process was started

	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string   // stdout lines; closed at EOF (roles only)
	done  chan struct{} // closed once the process has exited
}

// Start starts bin with args as a child called name, its stdout and
// stderr in its log file.
func (g *Group) Start(name, bin string, args ...string) (*Proc, error) {
	return g.start(name, false, bin, args...)
}

// StartRole starts bin with args as a child called name whose stdout
// comes back as lines (Expect) and whose stdin is open for commands
// (Send); its stderr goes to its log file.
func (g *Group) StartRole(name, bin string, args ...string) (*Proc, error) {
	return g.start(name, true, bin, args...)
}

func (g *Group) start(name string, talk bool, bin string, args ...string) (*Proc, error) {
	logPath := filepath.Join(g.dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Stderr = logf
	p := &Proc{Name: name, cmd: cmd, Log: logPath, done: make(chan struct{})}
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
		p.lines = make(chan string, 256)
	} else {
		cmd.Stdout = logf
	}
	p.Started = time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	g.mu.Lock()
	g.procs = append(g.procs, p)
	g.mu.Unlock()
	// Wait closes stdout once the process exits, so it waits for the last
	// line read first: a role's "written N" just before it exits was lost.
	read := make(chan struct{})
	if talk {
		go func() {
			defer close(read)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				select {
				case p.lines <- sc.Text():
				default: // nobody reads them: dropped, so that the process is still waited for
				}
			}
			close(p.lines)
		}()
	} else {
		close(read)
	}
	go func() {
		<-read
		cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// KillAll kills every child still running and waits for it.
func (g *Group) KillAll() {
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

// Done is closed once p has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Pid is p's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Stop asks p to end (its stdin closed, if it has one, and SIGTERM) and
// kills it after grace; it reports whether p ended by itself.
func (p *Proc) Stop(grace time.Duration) bool {
	if p.stdin != nil {
		p.stdin.Close()
	}
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

// Send writes one command line to a role's stdin.
func (p *Proc) Send(line string) error {
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// Expect waits up to within for a line of a role's starting with word and
// returns the rest of it.
func (p *Proc) Expect(ctx context.Context, word string, within time.Duration) (string, error) {
	t := time.NewTimer(within)
	defer t.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				<-p.done
				return "", fmt.Errorf("%s exited (%v) before saying %q; its log:\n%s", p.Name, p.cmd.ProcessState, word, p.Tail())
			}
			if rest, found := strings.CutPrefix(l, word); found {
				return strings.TrimSpace(rest), nil
			}
		case <-t.C:
			return "", fmt.Errorf("%s did not say %q within %v; its log:\n%s", p.Name, word, within, p.Tail())
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// Tail returns the last lines of p's log, indented, for an error to quote.
func (p *Proc) Tail() string {
	b, _ := os.ReadFile(p.Log)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "  " + string(bytes.Join(lines, []byte("\n  ")))
}

// CloseInput closes a role's stdin, which tells it to finish.
func (p *Proc) CloseInput() error { return p.stdin.Close() }
