package sbutil

import (
	"io"
	"os"
	"sync"
)

// A sandbox's host log (its supervisor's and pid 1's lines) is a file on
// the host, and some of its lines follow what a tenant does (a download
// cut short, a request that failed): left alone, a tenant repeating that
// could fill the host's disk. CapWriter bounds what one run writes, and
// TrimLog what the file keeps across runs.

// MaxRunLog is how much of a sandbox's host log one run of its pid 1
// may write.
const MaxRunLog = 1 << 20

// CapWriter passes at most limit bytes to w, in whole writes (a log
// line each), then one line saying the rest is dropped, then nothing.
// Writes past the limit report success, so the logger carries on.
func CapWriter(w io.Writer, limit int64) io.Writer {
	return &capWriter{w: w, left: limit}
}

type capWriter struct {
	w io.Writer
	// mu guards left and capped.
	mu     sync.Mutex
	left   int64
	capped bool
}

func (c *capWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if int64(len(p)) <= c.left {
		c.left -= int64(len(p))
		return c.w.Write(p)
	}
	if !c.capped {
		c.capped = true
		c.w.Write([]byte("log limit reached: further lines of this run are dropped\n"))
	}
	return len(p), nil
}

// TrimLog cuts the log file at path to its last keep bytes when it is
// over max (a missing file is left missing). Nothing may be writing it.
func TrimLog(path string, max, keep int64) error {
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() <= max {
		return err
	}
	tail := make([]byte, keep)
	n, err := f.ReadAt(tail, fi.Size()-keep)
	if err != nil && err != io.EOF {
		return err
	}
	tmp := path + ".trim"
	if err := os.WriteFile(tmp, append([]byte("(earlier lines trimmed)\n"), tail[:n]...), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
