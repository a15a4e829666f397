package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

func (h *harness) testRuns(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()
	run := func(id, team string, at time.Time) store.Run {
		return store.Run{ID: id, TeamID: team, SandboxID: "sb-" + id, Status: "running", Config: json.RawMessage(`{"agent":{}}`),
			Input: "task " + id, Messages: 1, CreatedAt: at, UpdatedAt: at}
	}
	for i := range 5 {
		if err := s.PutRun(ctx, run(fmt.Sprintf("ra%d", i), teamA.ID, t0.Add(time.Duration(i)*time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutRun(ctx, run("rb", teamB.ID, t0)); err != nil {
		t.Fatal(err)
	}
	checkErr(t, s.PutRun(ctx, run("ra1", teamB.ID, t0)), sandbox.ErrExist, "run ra1 already exists")
	checkErr(t, s.PutRun(ctx, run("r", "nope", t0)), sandbox.ErrNotFound, "team nope")
	checkErr(t, s.PutRun(ctx, store.Run{ID: "r", TeamID: teamA.ID, Status: "running"}), sandbox.ErrInvalid, "config is empty")

	// Updates keep the record whole, state and finish time included.
	upd := run("ra1", teamA.ID, t0.Add(time.Second))
	upd.Status, upd.Output, upd.State, upd.Usage, upd.LastEventID = "idle", "done", json.RawMessage(`{"version":1}`), json.RawMessage(`{"requests":2}`), 42
	upd.UpdatedAt, upd.FinishedAt = t0.Add(time.Minute), t0.Add(time.Minute)
	if err := s.PutRun(ctx, upd); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetRun(ctx, teamA.ID, "ra1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(upd, got); diff != "" {
		t.Errorf("run after update (-want +got):\n%s", diff)
	}
	_, err = s.GetRun(ctx, teamB.ID, "ra1")
	checkErr(t, err, sandbox.ErrNotFound, "run ra1")

	// Newest first, in pages, one team only, by status.
	var ids []string
	for after := ""; ; {
		page, next, err := s.ListRuns(ctx, store.RunFilter{TeamID: teamA.ID, After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			ids = append(ids, r.ID)
		}
		if next == "" {
			break
		}
		after = next
	}
	if want := []string{"ra4", "ra3", "ra2", "ra1", "ra0"}; !cmp.Equal(ids, want) {
		t.Errorf("pages = %v, want %v", ids, want)
	}
	running, _, err := s.ListRuns(ctx, store.RunFilter{Status: "running"})
	if err != nil {
		t.Fatal(err)
	}
	if len(running) != 5 { // ra0, ra2, ra3, ra4 and rb
		t.Errorf("running runs of all teams = %d, want 5", len(running))
	}
	_, _, err = s.ListRuns(ctx, store.RunFilter{TeamID: teamB.ID, After: "ra1"})
	checkErr(t, err, sandbox.ErrInvalid, "not a run")
}

func (h *harness) testRunEvents(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()
	rec := store.Run{ID: "r", TeamID: teamA.ID, Status: "running", Config: json.RawMessage(`{}`), CreatedAt: t0, UpdatedAt: t0}
	if err := s.PutRun(ctx, rec); err != nil {
		t.Fatal(err)
	}
	var batch []store.RunEvent
	for i := int64(1); i <= 10; i++ {
		batch = append(batch, store.RunEvent{RunID: "r", Seq: i, Type: "output", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
	}
	if err := s.AppendRunEvents(ctx, batch[:6]); err != nil {
		t.Fatal(err)
	}
	// A batch that repeats a sequence number adds nothing.
	checkErr(t, s.AppendRunEvents(ctx, batch[5:]), sandbox.ErrExist)
	if err := s.AppendRunEvents(ctx, batch[6:]); err != nil {
		t.Fatal(err)
	}
	got, err := s.RunEvents(ctx, "r", 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(batch[3:7], got); diff != "" {
		t.Errorf("events after 3 (-want +got):\n%s", diff)
	}
	all, err := s.RunEvents(ctx, "r", 0, 0)
	if err != nil || len(all) != 10 {
		t.Errorf("all events = %d, %v; want 10", len(all), err)
	}
	checkErr(t, s.AppendRunEvents(ctx, []store.RunEvent{{RunID: "r", Seq: 0, Type: "x", Data: json.RawMessage(`{}`)}}), sandbox.ErrInvalid, "start at 1")
	// The record counts the stored events, and a record saved before
	// they were (a server that then crashed) does not count them down.
	if err := s.PutRun(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetRun(ctx, teamA.ID, "r"); err != nil || got.LastEventID != 10 {
		t.Errorf("last event id = %d, %v; want 10, the last stored event", got.LastEventID, err)
	}
	// Deleting a run takes its events with it; another team's is not
	// found.
	checkErr(t, s.DeleteRun(ctx, teamB.ID, "r"), sandbox.ErrNotFound)
	if err := s.DeleteRun(ctx, teamA.ID, "r"); err != nil {
		t.Fatal(err)
	}
	if evs, err := s.RunEvents(ctx, "r", 0, 0); err != nil || len(evs) != 0 {
		t.Errorf("events after the run was deleted: %d, %v", len(evs), err)
	}
	checkErr(t, s.DeleteRun(ctx, teamA.ID, "r"), sandbox.ErrNotFound)
	checkErr(t, s.AppendRunEvents(ctx, []store.RunEvent{{RunID: "nope", Seq: 1, Type: "x", Data: json.RawMessage(`{}`)}}), sandbox.ErrNotFound)
}

func (h *harness) testSecrets(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()
	if err := s.PutSecret(ctx, store.Secret{TeamID: teamA.ID, Name: "OPENAI_API_KEY", Value: []byte("sealed-1"), UpdatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSecret(ctx, store.Secret{TeamID: teamA.ID, Name: "OPENAI_API_KEY", Value: []byte("sealed-2"), UpdatedAt: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSecret(ctx, teamA.ID, "OPENAI_API_KEY")
	if err != nil || string(got.Value) != "sealed-2" {
		t.Fatalf("secret = %q, %v; want the replaced value", got.Value, err)
	}
	_, err = s.GetSecret(ctx, teamB.ID, "OPENAI_API_KEY")
	checkErr(t, err, sandbox.ErrNotFound, "secret OPENAI_API_KEY")
	list, err := s.ListSecrets(ctx, teamA.ID)
	if err != nil || len(list) != 1 || list[0].Value != nil || !list[0].UpdatedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("list = %+v, %v; want one entry without its value", list, err)
	}
	checkErr(t, s.DeleteSecret(ctx, teamB.ID, "OPENAI_API_KEY"), sandbox.ErrNotFound)
	if err := s.DeleteSecret(ctx, teamA.ID, "OPENAI_API_KEY"); err != nil {
		t.Fatal(err)
	}
	checkErr(t, s.PutSecret(ctx, store.Secret{TeamID: teamA.ID, Name: "K"}), sandbox.ErrInvalid, "value is empty")
}
