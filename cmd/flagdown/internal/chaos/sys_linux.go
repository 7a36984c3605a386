package chaos

import "syscall"

// sysProcAttr makes a child die with the controller (SIGKILL when the controller's thread exits), so
// a controller killed mid-run leaves no platform behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
