package remote_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/remote"
)

// TestAdmin: keys, quotas and usage through the client, with an admin
// key and a team's, and the team's refusals as sentinels.
func TestAdmin(t *testing.T) {
	ts := startServer(t)
	ctx := t.Context()
	admin := ts.runtime(t, ts.Admin)

	k, err := admin.CreateKey(ctx, api.CreateKey{Name: "ci", NewTeam: "gamma"})
	if err != nil || k.Secret == "" || k.Team != "gamma" {
		t.Fatalf("CreateKey for a new team: %+v %v, want a secret of team gamma", k, err)
	}
	gamma := ts.runtime(t, k.Secret)
	if _, err := gamma.CreateKey(ctx, api.CreateKey{Name: "x", Admin: true}); !errors.Is(err, sandbox.ErrPermission) {
		t.Errorf("a team key making an admin key: %v, want ErrPermission", err)
	}
	own, err := gamma.CreateKey(ctx, api.CreateKey{Name: "second"})
	if err != nil || own.Team != "gamma" {
		t.Fatalf("CreateKey of the team's own: %+v %v", own, err)
	}
	keys, err := gamma.Keys(ctx, false)
	if err != nil || len(keys) != 2 {
		t.Fatalf("Keys of team gamma: %+v %v, want its 2", keys, err)
	}
	all, err := admin.Keys(ctx, true)
	if err != nil || len(all) < 3 {
		t.Errorf("Keys(all) with the admin key: %d keys, %v; want every team's (at least 3)", len(all), err)
	}
	if err := gamma.RevokeKey(ctx, own.ID); err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	if err := gamma.RevokeKey(ctx, "key-none"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("RevokeKey of no key: %v, want ErrNotFound", err)
	}
	if err := gamma.RevokeKey(ctx, "a/b"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("RevokeKey(%q): %v, want ErrNotFound", "a/b", err)
	}
	keys, _ = gamma.Keys(ctx, false)
	for _, kk := range keys {
		if kk.ID == own.ID && kk.RevokedAt == nil {
			t.Errorf("the revoked key is listed without RevokedAt: %+v", kk)
		}
	}

	want := api.Quota{Sandboxes: 3, CPUs: 2, MemoryBytes: 1 << 30}
	if _, err := gamma.SetQuota(ctx, "gamma", want); !errors.Is(err, sandbox.ErrPermission) {
		t.Errorf("a team key setting its quota: %v, want ErrPermission", err)
	}
	if got, err := admin.SetQuota(ctx, "gamma", want); err != nil || got != want {
		t.Fatalf("SetQuota: %+v %v, want %+v", got, err, want)
	}
	if got, err := gamma.Quota(ctx, "gamma"); err != nil || got != want {
		t.Errorf("Quota of the team's own: %+v %v, want %+v", got, err, want)
	}
	if _, err := gamma.Quota(ctx, "other"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Quota of another team: %v, want ErrNotFound", err)
	}

	rep, err := gamma.Usage(ctx, remote.UsageQuery{ByDay: true})
	if err != nil || !rep.To.After(rep.From) {
		t.Errorf("Usage: %+v %v, want this month's report", rep, err)
	}
	if _, err := gamma.Usage(ctx, remote.UsageQuery{Team: "default"}); !errors.Is(err, sandbox.ErrPermission) {
		t.Errorf("Usage of another team with a team key: %v, want ErrPermission", err)
	}
}

// TestAPIExec: a command through the API's exec endpoint, its output and
// exit code; a stopped sandbox's refusal as ErrState.
func TestAPIExec(t *testing.T) {
	ts := startServer(t)
	ctx := t.Context()
	rt := ts.runtime(t, ts.teamKey(t, "exec"))
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	ev, err := rt.APIExec(ctx, s.ID(), api.Exec{Cmd: "sh", Args: []string{"-c", "echo hi; echo oops >&2; exit 3"}}, &out, &errOut)
	if err != nil || ev.Type != "exit" || *ev.ExitCode != 3 || out.String() != "hi\n" || errOut.String() != "oops\n" {
		t.Errorf("APIExec: %+v %v, stdout %q, stderr %q; want exit 3, hi and oops", ev, err, out.String(), errOut.String())
	}
	if err := rt.Stop(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.APIExec(ctx, s.ID(), api.Exec{Cmd: "true"}, nil, nil); !errors.Is(err, sandbox.ErrState) {
		t.Errorf("APIExec in a stopped sandbox: %v, want ErrState", err)
	}
	if _, err := rt.APIExec(ctx, "a/b", api.Exec{Cmd: "true"}, nil, nil); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("APIExec(%q): %v, want ErrNotFound", "a/b", err)
	}
}
