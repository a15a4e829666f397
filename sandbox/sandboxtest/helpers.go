package sandboxtest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
)

// SyncBuffer is a bytes.Buffer safe for a process's output goroutine (or
// a server's logger) and the test to use at once.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *SyncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// Main is the TestMain of a package whose runtime re-executes the test
// binary for a sandbox's roles: role gets os.Args[1:] and says whether it
// was one of its roles (then the process exits with its error); the role
// "echo-server PORT" is the TCP echo server the conformance suite's
// Listen hook starts inside a sandbox. Anything else runs the tests.
func Main(m *testing.M, role func(args []string) (handled bool, err error)) {
	if len(os.Args) > 2 && os.Args[1] == "echo-server" {
		EchoServer(os.Args[2])
		os.Exit(0)
	}
	if len(os.Args) > 1 && role != nil {
		if handled, err := role(os.Args[1:]); handled {
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	code := m.Run()
	for i := len(atExit) - 1; i >= 0; i-- {
		atExit[i]()
	}
	os.Exit(code)
}

// atExit holds what AtExit registered.
var atExit []func()

// AtExit registers f to run once the package's tests have run, before
// Main exits (last registered, first run): for what tests share, such as
// a runtime's state directory, which no single test's Cleanup may remove.
// Call it from tests, not concurrently with Main's end.
func AtExit(f func()) { atExit = append(atExit, f) }

// EchoServer serves TCP echo on 127.0.0.1:port (the sandbox's own
// loopback), printing "listening" once it does.
func EchoServer(port string) {
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("listening")
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() { io.Copy(c, c); c.Close() }()
	}
}
