package guest

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
)

// TestDialErrorHidesSocketPath: a daemon that cannot be reached over its
// unix socket is ErrUnavailable with the errno, and the error does not
// carry the socket's host path, which would reach a tenant through a
// run's tool result or an API error.
func TestDialErrorHidesSocketPath(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "secret-host-dir", "guest.sock")
	c, err := NewClient("unix://"+sock, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Health(t.Context())
	if !errors.Is(err, sandbox.ErrUnavailable) || !errors.Is(err, syscall.ENOENT) {
		t.Errorf("Health of a missing daemon: %v, want ErrUnavailable and ENOENT", err)
	}
	if err != nil && (strings.Contains(err.Error(), "secret-host-dir") || strings.Contains(err.Error(), "guest.sock")) {
		t.Errorf("the error names the host's socket path: %v", err)
	}
}
