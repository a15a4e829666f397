package sbutil

import "golang.org/x/sys/unix"

// Readlinkat reads the target of the symlink name in directory dir, or,
// with name "", of the symlink an O_PATH|O_NOFOLLOW descriptor dir holds:
// a link is read where it was found, never looked up again by a path
// that something else could change meanwhile.
func Readlinkat(dir int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dir, name, buf)
		if err == unix.EINTR {
			size /= 2
			continue
		}
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}
