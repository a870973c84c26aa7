//go:build unix && !linux

package testenv

import "syscall"

// childAttr runs a child as cred (nil: as ourselves). Without Linux's parent-death signal, a
// cluster left by a killed test binary is only stopped by the next binary's sweep.
func childAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}

const shmDir = ""

func fastTempBase() string { return "" }

func removeOrphanShm(string) {}
