package sandboxtool_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/tool/sandboxtool"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/hostproc/hostproctest"
)

// The test binary doubles as the in-sandbox daemon (hostproctest): real
// programs run as the tools' commands.
func TestMain(m *testing.M) { hostproctest.Main(m) }

// newHostTools returns tools over a hostproc sandbox: real programs, no
// isolation. The tools are closed at the end of the test.
func newHostTools(t *testing.T, opts sandboxtool.Options) (*sandboxtool.Tools, sandbox.Session) {
	t.Helper()
	sess, err := hostproctest.New(t).Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	tools := sandboxtool.New(sess, opts)
	t.Cleanup(func() {
		if err := tools.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tools, sess
}

func TestHostExec(t *testing.T) {
	t.Parallel()
	tools, _ := newHostTools(t, sandboxtool.Options{})
	for _, tc := range []struct{ args, want string }{
		{`{"cmd": "echo hello"}`, exited(0, "hello\n")},
		{`{"cmd": "echo oops >&2; exit 7"}`, exited(7, "oops\n")},
		// The default shell is bash where there is one.
		{`{"cmd": "[ -n \"$BASH_VERSION\" ] && echo bash"}`, exited(0, "bash\n")},
		{`{"cmd": "[ -n \"$BASH_VERSION\" ] || echo sh", "shell": "sh"}`, exited(0, "sh\n")},
	} {
		r := call(t, tools.ExecCommand(), tc.args)
		if r.err != nil || r.text != tc.want {
			t.Errorf("%s: got %q (%v), want %q", tc.args, r.text, r.err, tc.want)
		}
	}
}

// TestHostTTY drives interactive programs on a real PTY through
// write_stdin: input is echoed and answered, Ctrl-C interrupts.
func TestHostTTY(t *testing.T) {
	t.Parallel()
	tools, _ := newHostTools(t, sandboxtool.Options{})
	if r := call(t, tools.ExecCommand(), `{"cmd": "command -v python3", "login": false}`); r.raw.ExitCode == nil || *r.raw.ExitCode != 0 {
		t.Log("python3 is not installed: testing cat only")
	} else {
		t.Run("python3", func(t *testing.T) {
			id := startTTY(t, tools, "python3 -q -i")
			r := writeUntil(t, tools, id, `print(6*7)\n`, "42")
			if r.raw.ExitCode != nil {
				t.Fatalf("python exited early: %q", r.text)
			}
			writeUntil(t, tools, id, `exit()\n`, "Process exited with code 0")
		})
	}
	t.Run("cat", func(t *testing.T) {
		id := startTTY(t, tools, "cat")
		writeUntil(t, tools, id, `hello\n`, "hello\r\nhello\r\n") // the terminal's echo, then cat's
		r := writeUntil(t, tools, id, `\u0003`, "Process exited with code 130")
		if r.raw.ExitCode == nil || *r.raw.ExitCode != 130 {
			t.Errorf("ExitCode %v after Ctrl-C, want 130 (SIGINT)", r.raw.ExitCode)
		}
	})
}

func startTTY(t *testing.T, tools *sandboxtool.Tools, cmd string) int {
	t.Helper()
	r := call(t, tools.ExecCommand(), fmt.Sprintf(`{"cmd": %q, "tty": true, "yield_time_ms": 500}`, cmd))
	if r.err != nil {
		t.Fatal(r.err)
	}
	return sessionID(t, r)
}

// writeUntil sends chars (JSON string content) and keeps polling until the
// answers so far contain want, for a few seconds.
func writeUntil(t *testing.T, tools *sandboxtool.Tools, id int, chars, want string) result {
	t.Helper()
	var seen strings.Builder
	deadline := time.Now().Add(10 * time.Second)
	args := fmt.Sprintf(`{"session_id": %d, "chars": "%s", "yield_time_ms": 500}`, id, chars)
	for {
		r := call(t, tools.WriteStdin(), args)
		if r.err != nil {
			t.Fatalf("write_stdin %s: %v (so far %q)", args, r.err, seen.String())
		}
		seen.WriteString(r.text)
		if strings.Contains(seen.String(), want) {
			return r
		}
		if r.raw.ExitCode != nil || time.Now().After(deadline) {
			t.Fatalf("write_stdin %s: answers %q, want them to contain %q", args, seen.String(), want)
		}
		args = fmt.Sprintf(`{"session_id": %d, "chars": "", "yield_time_ms": 500}`, id)
	}
}

// TestHostLifetime: a hanging real process is killed at MaxLifetime and
// the next poll says so.
func TestHostLifetime(t *testing.T) {
	t.Parallel()
	tools, sess := newHostTools(t, sandboxtool.Options{MaxLifetime: 500 * time.Millisecond})
	r := call(t, tools.ExecCommand(), `{"cmd": "sleep 1000", "yield_time_ms": 250}`)
	id := sessionID(t, r)
	start := time.Now()
	r = call(t, tools.WriteStdin(), fmt.Sprintf(`{"session_id": %d}`, id))
	want := exited(137, "Process killed: it ran longer than the maximum lifetime of 500ms.")
	if r.err != nil || r.text != want {
		t.Errorf("got %q (%v), want %q", r.text, r.err, want)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the kill was told after %v, want it soon after the 500ms lifetime", d)
	}
	ps, err := sess.Processes(t.Context())
	if err != nil || len(ps) != 0 {
		t.Errorf("processes after the kill: %+v (%v), want none", ps, err)
	}
}

func TestHostViewImage(t *testing.T) {
	t.Parallel()
	tools, sess := newHostTools(t, sandboxtool.Options{})
	ctx := t.Context()
	img := image.NewRGBA(image.Rect(0, 0, 3, 2))
	img.Set(1, 1, color.RGBA{R: 255, A: 255})
	var pngData bytes.Buffer
	if err := png.Encode(&pngData, img); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"img/dot.png": pngData.Bytes(),
		"notes.txt":   []byte("not an image\n"),
		// The PNG signature, then more than 10 MB.
		"big.png": append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, sandboxtool.MaxImageBytes)...),
	}
	for name, data := range files {
		if err := sess.WriteFile(ctx, name, bytes.NewReader(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	r := call(t, tools.ViewImage(), `{"path": "img/dot.png"}`)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.raw.Output) != 1 || r.raw.Output[0].Type != agent.ContentImage {
		t.Fatalf("output %+v, want one image", r.raw.Output)
	}
	b64, ok := strings.CutPrefix(r.raw.Output[0].ImageURL, "data:image/png;base64,")
	if !ok {
		t.Fatalf("image URL %.40q..., want a PNG data URL", r.raw.Output[0].ImageURL)
	}
	if got, err := base64.StdEncoding.DecodeString(b64); err != nil || !bytes.Equal(got, pngData.Bytes()) {
		t.Errorf("data URL holds %d bytes (%v), want the %d-byte PNG written", len(got), err, pngData.Len())
	}

	for _, tc := range []struct {
		path string
		want error
		says string
	}{
		{"notes.txt", sandbox.ErrInvalid, "is not a supported image file"},
		{"big.png", sandbox.ErrLimit, "exceeded the allowed size of 10MB"},
		{"missing.png", sandbox.ErrNotFound, "image path `missing.png` was not found"},
		{"img", sandbox.ErrInvalid, "unable to read image at `img`"},
		{"../outside.png", sandbox.ErrInvalid, "unable to read image at `../outside.png`"},
	} {
		r := call(t, tools.ViewImage(), fmt.Sprintf(`{"path": %q}`, tc.path))
		if !errors.Is(r.err, tc.want) || !strings.Contains(fmt.Sprint(r.err), tc.says) {
			t.Errorf("view_image %s: %v, want %v saying %q", tc.path, r.err, tc.want, tc.says)
		}
	}
}
