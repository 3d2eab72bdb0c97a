package benchkit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/shaper-dev/shaper/internal/freeport"
)

// ClockTicks is the unit of utime and stime in /proc/PID/stat (USER_HZ,
// 100 on every Linux architecture Go runs on).
const ClockTicks = 100

// CPUTicks returns the user+system CPU time of process pid, all its
// threads together, in clock ticks (fields 14 and 15 of /proc/PID/stat).
func CPUTicks(pid int) (int64, error) {
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

// CPUSeconds is CPUTicks in seconds.
func CPUSeconds(pid int) (float64, error) {
	t, err := CPUTicks(pid)
	return float64(t) / ClockTicks, err
}

// Memory returns the resident set of process pid and its peak, in bytes
// (VmRSS and VmHWM of /proc/PID/status).
func Memory(pid int) (rss, peak float64, err error) {
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

// LoadAvg returns the 1-, 5- and 15-minute load averages of the machine.
func LoadAvg() string {
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

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on,
// outside the range outgoing connections take theirs from (see package
// freeport).
func FreePort() (int, error) { return freeport.One() }
