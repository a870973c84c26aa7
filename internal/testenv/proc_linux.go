package testenv

import (
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// childAttr runs a child as cred (nil: as ourselves) and has the kernel SIGKILL it when the thread
// that started it dies. Go applies the parent-death signal after changing credentials, since a
// credential change would clear it.
func childAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}

// shmDir is a RAM file system on most Linux machines. Creating the ~1000 files of a data directory
// there takes tens of milliseconds instead of about a second on some virtual disks.
const shmDir = "/dev/shm"

// fastTempBase returns shmDir when it is a writable tmpfs with at least 1 GiB free (Docker's
// default of 64 MiB is not enough), else "".
func fastTempBase() string {
	const tmpfsMagic = 0x01021994
	var st syscall.Statfs_t
	if err := syscall.Statfs(shmDir, &st); err != nil || st.Type != tmpfsMagic {
		return ""
	}
	if uint64(st.Bavail)*uint64(st.Bsize) < 1<<30 {
		return ""
	}
	if syscall.Access(shmDir, 2 /* W_OK */) != nil {
		return ""
	}
	return shmDir
}

// removeOrphanShm removes the System V shared memory segment that a dead postmaster left behind,
// given the "key id" line of its postmaster.pid, if the segment still has that key and no process
// is attached. PostgreSQL removes it itself on a clean shutdown, not when it is killed.
func removeOrphanShm(keyAndID string) {
	f := strings.Fields(keyAndID)
	if len(f) != 2 {
		return
	}
	key, err1 := strconv.ParseUint(f[0], 10, 64)
	id, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || key == 0 {
		return
	}
	var d unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &d); err != nil {
		return
	}
	if uint64(uint32(d.Perm.Key)) != key || d.Nattch != 0 {
		return
	}
	_, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil)
}
