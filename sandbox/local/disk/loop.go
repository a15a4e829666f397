package disk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
)

const loopControl = "/dev/loop-control"

// loopMajor is the block major number of loop devices.
const loopMajor = 7

// attachLoop binds image to a free loop device with autoclear set, so the
// device frees itself when its last user (the mount) goes away, and returns
// the open device. The caller mounts it and then closes the file.
func attachLoop(image string) (*os.File, error) {
	img, err := os.OpenFile(image, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	ctl, err := os.OpenFile(loopControl, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, loopUnavailable(err)
	}
	defer ctl.Close()

	// LOOP_CTL_GET_FREE only names a free device: another process may
	// take it before we configure it (EBUSY), so try again a few times.
	var lastErr error
	for range 20 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, loopUnavailable(fmt.Errorf("finding a free loop device: %w", err))
		}
		dev, err := openLoop(n)
		if err != nil {
			return nil, loopUnavailable(err)
		}
		err = configureLoop(dev, img)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("binding %s to %s: %w", image, dev.Name(), err)
		}
		lastErr = err
	}
	return nil, fmt.Errorf("binding %s to a loop device: every free device was taken first: %w: %w", image, lastErr, sandbox.ErrUnavailable)
}

// openLoop opens /dev/loopN, creating the node when /dev is a static
// tmpfs (a container's) that lacks the devices the kernel just made.
func openLoop(n int) (*os.File, error) {
	name := fmt.Sprintf("/dev/loop%d", n)
	f, err := os.OpenFile(name, os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		if err := unix.Mknod(name, unix.S_IFBLK|0o660, int(unix.Mkdev(loopMajor, uint32(n)))); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("creating %s: %w", name, err)
		}
		f, err = os.OpenFile(name, os.O_RDWR|unix.O_CLOEXEC, 0)
	}
	return f, err
}

// configureLoop binds img to dev in one step (LOOP_CONFIGURE, Linux 5.8),
// or with LOOP_SET_FD and LOOP_SET_STATUS64 on older kernels. Direct I/O
// keeps the image's blocks out of the host's page cache (the sandbox's
// filesystem caches them already); it is dropped where unsupported.
func configureLoop(dev, img *os.File) error {
	cfg := unix.LoopConfig{Fd: uint32(img.Fd()), Size: blockSize}
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
	err := unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
	if errors.Is(err, unix.EINVAL) {
		cfg.Info.Flags &^= unix.LO_FLAGS_DIRECT_IO
		cfg.Size = 0
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
	}
	if !errors.Is(err, unix.ENOTTY) {
		return err
	}
	if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_FD, int(img.Fd())); err != nil {
		return err
	}
	info := unix.LoopInfo64{Flags: unix.LO_FLAGS_AUTOCLEAR}
	if err := unix.IoctlLoopSetStatus64(int(dev.Fd()), &info); err != nil {
		unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
		return err
	}
	return nil
}

func loopUnavailable(err error) error {
	return fmt.Errorf("loop devices are unavailable (%w): the disk limit needs them; give the host (or container) /dev/loop-control and loop devices, or run without a disk limit: %w", err, sandbox.ErrUnavailable)
}

// loopsBacking lists the loop devices (e.g. "loop3") bound to image, read
// from sysfs.
func loopsBacking(image string) []string {
	want, err := filepath.EvalSymlinks(image)
	if err != nil {
		want = image
	}
	paths, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var devs []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == want {
			devs = append(devs, filepath.Base(filepath.Dir(filepath.Dir(p))))
		}
	}
	return devs
}

// imageBusy reports whether something holds image open for writing: a
// loop device bound to it does. A read lease is granted only on a file no
// one has open for writing, so trying to take one answers in O(1); where
// leases are unsupported, the loop devices' sysfs entries are scanned
// instead (O(number of loop devices)).
func imageBusy(image string) bool {
	f, err := os.Open(image)
	if err != nil {
		return false
	}
	defer f.Close() // closing drops the lease too
	_, err = unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_RDLCK)
	switch {
	case err == nil:
		unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
		return false
	case errors.Is(err, unix.EAGAIN):
		return true
	default:
		return len(loopsBacking(image)) > 0
	}
}

// waitDetached waits until no loop device is bound to image, for at most
// timeout, and returns those still bound: the kernel clears an autoclear
// device asynchronously after its last user leaves.
func waitDetached(image string, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for delay := 100 * time.Microsecond; ; delay = min(2*delay, 20*time.Millisecond) {
		if !imageBusy(image) {
			return nil
		}
		if time.Now().After(deadline) {
			devs := loopsBacking(image)
			if len(devs) == 0 {
				devs = []string{"(an open file)"}
			}
			return devs
		}
		time.Sleep(delay)
	}
}
