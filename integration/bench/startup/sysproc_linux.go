package main

import "syscall"

// sysProcAttr has the kernel kill a child when this process dies, however
// it dies (a SIGKILL skips every deferred clean-up).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
