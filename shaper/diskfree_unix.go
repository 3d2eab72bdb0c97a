//go:build unix

package shaper

import "syscall"

// diskFree returns the bytes free to this process on the disk of dir.
func diskFree(dir string) (int64, bool) {
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
