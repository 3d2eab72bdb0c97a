package integration

import "syscall"

// procAttr has the kernel kill a started process when the test binary dies
// (a panic or -timeout), which skips the t.Cleanup that would kill it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
