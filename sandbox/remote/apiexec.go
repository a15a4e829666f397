package remote

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
)

// APIExec runs a command in sandbox id through the API's own exec
// endpoint (POST /v1/sandboxes/{id}/exec, NDJSON), not through the
// daemon's proxy that a Session uses: it is what clients without a
// daemon client call, and what `cove bench --server` times. Output goes
// to stdout and stderr (either may be nil); the answer is the stream's
// last event, "exit". A stream that ends in an "error" event, or without
// an exit, is an error.
func (r *Runtime) APIExec(ctx context.Context, id string, req api.Exec, stdout, stderr io.Writer) (api.ExecEvent, error) {
	p, err := sandboxPath(id, "/exec")
	if err != nil {
		return api.ExecEvent{}, err
	}
	resp, err := r.send(ctx, http.MethodPost, p, req)
	if err != nil {
		return api.ExecEvent{}, fmt.Errorf("running %q in sandbox %q: %w", req.Cmd, id, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4<<10), 1<<20) // grows for long lines only
	for sc.Scan() {
		var ev api.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return api.ExecEvent{}, sandbox.WrapIDf(id, err, "reading the exec stream of sandbox %q", id)
		}
		switch ev.Type {
		case "stdout", "stderr":
			w := stdout
			if ev.Type == "stderr" {
				w = stderr
			}
			if w != nil {
				if _, err := w.Write(ev.Data); err != nil {
					return api.ExecEvent{}, err
				}
			}
		case "exit":
			if ev.ExitCode == nil {
				return ev, fmt.Errorf("the exec stream of sandbox %q ended with an exit event without a code", id)
			}
			return ev, nil
		case "error":
			e := &Error{Code: ev.Code, Message: ev.Error}
			return ev, sandbox.WrapIDf(id, e, "exec in sandbox %q", id)
		}
	}
	if ctx.Err() != nil {
		return api.ExecEvent{}, ctx.Err()
	}
	return api.ExecEvent{}, fmt.Errorf("the exec stream of sandbox %q ended without an exit event: %v", id, sc.Err())
}
