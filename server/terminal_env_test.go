package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cove-sandbox/cove/api"
)

// TestPTYTerminalEnv: the web terminal's shell (the PTY WebSocket with no
// command) is on a terminal programs can use: TERM=xterm-256color, so
// tput finds 256 colours, and a SHELL.
func TestPTYTerminalEnv(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/v1/sandboxes/" + sb.ID + "/pty?cols=90&rows=30"
	conn, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if err := conn.Write(ctx, websocket.MessageBinary, []byte(`echo "T=$TERM S=${SHELL:-unset} C=$(tput colors)."`+"\n")); err != nil {
		t.Fatal(err)
	}
	var screen strings.Builder
	for want := "T=xterm-256color S=/"; !strings.Contains(screen.String(), want); {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for %q: %v; screen so far %q", want, err, screen.String())
		}
		if typ == websocket.MessageBinary {
			screen.Write(data)
		}
	}
	for !strings.Contains(screen.String(), "C=256.") {
		_, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("tput colors in the web terminal: %v; screen %q", err, screen.String())
		}
		screen.Write(data)
	}
	conn.Write(ctx, websocket.MessageBinary, []byte("exit\n"))
}
