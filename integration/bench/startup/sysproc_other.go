//go:build !linux

package main

import "syscall"

// sysProcAttr: only Linux kills children with their parent; elsewhere the
// deferred clean-up does it (and the figures read from /proc fail).
func sysProcAttr() *syscall.SysProcAttr { return nil }
