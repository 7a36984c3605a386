//go:build !linux

package chaos

import "syscall"

// sysProcAttr: outside Linux children are not tied to the controller's life.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
