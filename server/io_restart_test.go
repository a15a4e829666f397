package server

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/cove-sandbox/cove/api"
)

// TestProcessesSurviveRestart: the server holds no per-process state, so
// a restarted server (a new Server over the same store and runtime) can
// feed, close the stdin of and signal background processes its
// predecessor started, and attach to get all their output, the output
// written before the restart included.
func TestProcessesSurviveRestart(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "restart")
	sb := ts.create(t, key, api.CreateSandbox{})
	base := "/v1/sandboxes/" + sb.ID
	fed := ts.run(t, key, sb.ID, api.Exec{Cmd: `echo before; read line; echo "got $line"`, Shell: true, Background: true})
	sleeper := ts.run(t, key, sb.ID, api.Exec{Cmd: "sleep 60", Shell: true, Background: true, Tag: "sleeper"})
	for _, r := range []result{fed, sleeper} {
		if !slices.Equal(r.types, []string{"start"}) || r.pid <= 0 {
			t.Fatalf("background exec: events %v, want only start with a pid", r.types)
		}
	}

	ts2 := ts.restart(t)
	fedPath := fmt.Sprintf("%s/processes/%d", base, fed.pid)
	ts2.must(t, 204, "POST", fedPath+"/stdin", key, "x\n", nil)
	ts2.must(t, 204, "POST", fedPath+"/stdin/close", key, nil, nil)
	res := ts2.openStream(t, context.Background(), fedPath+"/attach", key, nil).rest(t)
	if res.stdout != "before\ngot x\n" || exitCode(res.exit) != 0 {
		t.Errorf("attached after the restart: %q exit %+v, want %q and 0", res.stdout, res.exit, "before\ngot x\n")
	}

	ts2.must(t, 204, "POST", base+"/processes/tag/sleeper/signal", key, api.Signal{Signal: "TERM"}, nil)
	res = ts2.openStream(t, context.Background(), base+"/processes/tag/sleeper/attach", key, nil).rest(t)
	if res.pid != sleeper.pid || res.exit.Type != "exit" || res.exit.Signal == "" {
		t.Errorf("after TERM through the restarted server: pid %d, last event %+v; want pid %d and an exit by signal", res.pid, res.exit, sleeper.pid)
	}
}

// TestBackgroundTimeoutSurvivesRestart: a background process's
// timeout_seconds is the sandbox's to enforce, so it still ends the
// process when the server that started it is gone.
func TestBackgroundTimeoutSurvivesRestart(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "timeout")
	sb := ts.create(t, key, api.CreateSandbox{})
	r := ts.run(t, key, sb.ID, api.Exec{Cmd: "sleep 60", Shell: true, Background: true, TimeoutSeconds: 1})
	if r.pid <= 0 {
		t.Fatalf("background exec: events %v, want a start with a pid", r.types)
	}
	ts2 := ts.restart(t)
	res := ts2.openStream(t, context.Background(), fmt.Sprintf("/v1/sandboxes/%s/processes/%d/attach", sb.ID, r.pid), key, nil).rest(t)
	if res.exit.Type != "exit" || res.exit.Signal == "" {
		t.Errorf("attached after the restart: last event %+v, want an exit by signal (the timeout's kill)", res.exit)
	}
}
