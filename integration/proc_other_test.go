//go:build !linux

package integration

import "syscall"

// procAttr is empty where there is no parent-death signal: t.Cleanup kills
// the processes.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
