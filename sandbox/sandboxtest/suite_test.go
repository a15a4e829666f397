package sandboxtest

import (
	"io"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
)

func TestFake(t *testing.T) {
	RunWithOptions(t, func(t *testing.T) sandbox.Runtime { return NewFake() }, Options{Listen: fakeListen})
}

// fakeListen serves an echo server on the fake sandbox's in-memory port.
func fakeListen(t *testing.T, s sandbox.Session, port int) (stop func()) {
	fs, ok := s.(*FakeSession)
	if !ok {
		t.Fatalf("session is a %T, want *FakeSession", s)
	}
	l := fs.Listen(port)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return // closed by stop or by the sandbox stopping
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return func() { _ = l.Close() }
}
