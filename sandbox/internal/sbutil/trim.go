package sbutil

import (
	"bufio"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// TrimMemory gives back what an idle supervisor or daemon holds but does
// not need: the Go heap's free pages, and its page-table mappings of the
// executable's read-only segments (code and constants), which the
// program's start-up touched (every package's init, the command-line
// dispatch) and an idle process never touches again. The pages stay in the
// page cache, shared by every sandbox, and fault back in without I/O when
// used; only this process's resident set shrinks. Writable mappings are
// left alone, so no state is lost.
func TrimMemory() {
	debug.FreeOSMemory()
	var exe syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &exe); err != nil {
		return
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || strings.Contains(fields[1], "w") {
			continue
		}
		if ino, err := strconv.ParseUint(fields[4], 10, 64); err != nil || ino != exe.Ino {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		// The raw call: the range is not Go memory, so no slice of it.
		// NOHUGEPAGE first: a page cache of large folios is otherwise
		// mapped back 2 MB at a time on the next touch.
		unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_NOHUGEPAGE)
		unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_DONTNEED)
	}
}
