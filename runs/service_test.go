package runs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/agent/model/openai"
	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/runs"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/hostproc/hostproctest"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/sqlite"
)

// The test binary doubles as the in-sandbox daemon (hostproctest.Main).
// The agents' commands are real programs.
func TestMain(m *testing.M) { hostproctest.Main(m) }

// boxes is a Sandboxes over a hostproc runtime, recording deletes.
type boxes struct {
	rt      sandbox.Runtime
	st      store.Store
	mu      sync.Mutex
	deleted []string
}

func (b *boxes) Create(ctx context.Context, team string, req api.CreateSandbox) (store.Sandbox, sandbox.Session, error) {
	sess, err := b.rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		return store.Sandbox{}, nil, err
	}
	rec := store.Sandbox{ID: sess.ID(), TeamID: team, State: store.StateRunning, CreatedAt: time.Now(), StartedAt: time.Now()}
	if err := b.st.PutSandbox(ctx, rec); err != nil {
		b.rt.Delete(ctx, sess.ID())
		return rec, nil, err
	}
	return rec, sess, nil
}

func (b *boxes) Open(ctx context.Context, team, id string) (sandbox.Session, error) {
	if _, err := b.st.GetSandbox(ctx, team, id); err != nil {
		return nil, err
	}
	return b.rt.Get(ctx, id)
}

func (b *boxes) Delete(ctx context.Context, team, id string) error {
	b.mu.Lock()
	b.deleted = append(b.deleted, id)
	b.mu.Unlock()
	if err := b.rt.Delete(ctx, id); err != nil {
		return err
	}
	return b.st.DeleteSandbox(ctx, id)
}

func (b *boxes) Stop(ctx context.Context, team, id string) (store.Sandbox, error) {
	rec, err := b.st.GetSandbox(ctx, team, id)
	if err != nil {
		return rec, err
	}
	return rec, b.rt.Stop(ctx, id)
}

func (b *boxes) Begin(id string) (end func()) { return func() {} }

func models(ctx context.Context, spec runs.ModelSpec) (agent.Model, error) {
	m, err := openai.New(openai.Config{Model: spec.Model, APIKey: spec.APIKey, BaseURL: spec.BaseURL, API: openai.API(spec.API),
		NoEnv: true, HTTPClient: spec.HTTPClient, BaseURLSetting: spec.BaseURLSetting, KeySetting: spec.KeySetting})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// newService returns a started service whose model is model, over a
// hostproc runtime and a SQLite store in a temp dir.
func newService(t *testing.T, model *fake.Server) (*runs.Service, *boxes) {
	t.Helper()
	dir, err := os.MkdirTemp("", "runs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rt := hostproctest.New(t)
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, team := range []string{"alpha", "beta"} {
		if err := st.CreateTeam(context.Background(), store.Team{ID: team, Name: team, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	b := &boxes{rt: rt, st: st}
	s, err := runs.New(runs.Config{Store: st, Sandboxes: b, Models: models, DataDir: filepath.Join(dir, "data"),
		Model: runs.ModelConfig{BaseURL: model.URL, APIKey: "sk-server", DefaultModel: "test-model"}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() {
		s.Close()
		ctx := context.Background()
		if infos, err := rt.List(ctx); err == nil {
			for _, in := range infos {
				rt.Delete(ctx, in.ID)
			}
		}
		st.Close()
	})
	return s, b
}

// settle reads the run's log from after until the run stops working, and
// returns the events read and the run.
func settle(t *testing.T, s *runs.Service, team, id string, after int64) ([]store.RunEvent, api.Run) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	feed, err := s.Events(ctx, team, id, after)
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	var evs []store.RunEvent
	for {
		b, err := feed.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, b.Events...)
		if len(b.Events) > 0 {
			continue
		}
		if b.Deleted || !b.Working {
			break
		}
		select {
		case <-b.Changed:
		case <-ctx.Done():
			t.Fatal("the run did not stop")
		}
	}
	run, err := s.Get(ctx, team, id)
	if err != nil {
		t.Fatal(err)
	}
	return evs, run
}

// TestService: a run through the service alone: an approval, a
// follow-up, tenancy, the errors of each operation, delete.
func TestService(t *testing.T) {
	model := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"rm -rf old.txt"}`),
		fake.Text("removed it"),
		fake.Text("nothing else"),
	)
	s, _ := newService(t, model)
	ctx := context.Background()

	run, err := s.Create(ctx, "alpha", api.CreateRun{Input: "  remove old.txt "}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != api.RunRunning || run.Input != "remove old.txt" || run.SandboxID == "" {
		t.Fatalf("created run = %+v", run)
	}
	evs, run := settle(t, s, "alpha", run.ID, 0)
	if len(evs) == 0 || evs[0].Type != string(runs.EventUserMessage) || evs[0].Seq != 1 {
		t.Errorf("first event = %+v, want the input numbered 1", evs[0])
	}
	if run.Status != api.RunWaiting || len(run.Approvals) != 1 || run.Approvals[0].Command != "rm -rf old.txt" {
		t.Fatalf("run after its first segment = %+v, want it waiting on the rm", run)
	}
	if _, err := s.Message(ctx, "alpha", run.ID, "hurry"); !errors.Is(err, sandbox.ErrState) {
		t.Errorf("a message while approvals wait: %v, want ErrState", err)
	}
	if _, err := s.Decide(ctx, "alpha", run.ID, api.RunDecisions{All: "sure"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a bad decision: %v, want ErrInvalid", err)
	}
	for _, team := range []string{"beta"} {
		if _, err := s.Get(ctx, team, run.ID); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("another team's Get: %v, want ErrNotFound", err)
		}
		if _, err := s.Decide(ctx, team, run.ID, api.RunDecisions{All: "approve"}); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("another team's Decide: %v, want ErrNotFound", err)
		}
	}

	last := run.LastEventID
	if _, err := s.Decide(ctx, "alpha", run.ID, api.RunDecisions{All: "approve"}); err != nil {
		t.Fatal(err)
	}
	more, run := settle(t, s, "alpha", run.ID, last)
	if len(more) == 0 || more[0].Seq != last+1 || run.Status != api.RunIdle || run.Output != "removed it" {
		t.Fatalf("after the approval: %d events from %+v; run %+v", len(more), more, run)
	}
	if _, err := s.Cancel(ctx, "alpha", run.ID); !errors.Is(err, sandbox.ErrState) {
		t.Errorf("cancelling an idle run: %v, want ErrState", err)
	}
	if _, err := s.Message(ctx, "alpha", run.ID, " "); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("an empty message: %v, want ErrInvalid", err)
	}
	if _, err := s.Message(ctx, "alpha", run.ID, "anything else?"); err != nil {
		t.Fatal(err)
	}
	_, run = settle(t, s, "alpha", run.ID, run.LastEventID)
	if run.Status != api.RunIdle || run.Output != "nothing else" || run.Messages != 2 {
		t.Errorf("after the follow-up: %+v", run)
	}

	list, err := s.List(ctx, "alpha", runs.ListOptions{})
	if err != nil || len(list.Runs) != 1 || list.Runs[0].ID != run.ID || list.Runs[0].Status != api.RunIdle {
		t.Errorf("List = %+v, %v", list, err)
	}
	if _, err := s.List(ctx, "alpha", runs.ListOptions{Status: "done"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("listing by an unknown status: %v, want ErrInvalid", err)
	}
	if err := s.Delete(ctx, "beta", run.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another team's Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "alpha", run.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "alpha", run.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
}

// TestServiceCreateRefused: a create that cannot run makes nothing, and
// a sandbox made for a workspace that does not load is deleted.
func TestServiceCreateRefused(t *testing.T) {
	model := fake.NewServer(t)
	s, b := newService(t, model)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  api.CreateRun
		want error
	}{
		{"empty input", api.CreateRun{Input: " "}, sandbox.ErrInvalid},
		{"approval", api.CreateRun{Input: "x", Agent: api.RunAgent{Approval: "sometimes"}}, sandbox.ErrInvalid},
		{"missing secret", api.CreateRun{Input: "x", Agent: api.RunAgent{APIKeySecret: "MY_KEY"}}, sandbox.ErrInvalid},
		{"unknown capability", api.CreateRun{Input: "x", Agent: api.RunAgent{Capabilities: []string{"shell", "network"}}}, sandbox.ErrInvalid},
		{"no such sandbox", api.CreateRun{Input: "x", SandboxID: "sb_nope"}, sandbox.ErrNotFound},
	} {
		if _, err := s.Create(ctx, "alpha", tc.req, nil); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	_, err := s.Create(ctx, "alpha", api.CreateRun{Input: "x"}, strings.NewReader("not a tar"))
	if err == nil || !strings.Contains(err.Error(), "the sandbox was deleted") {
		t.Errorf("a workspace that is not a tar: %v", err)
	}
	b.mu.Lock()
	deleted := len(b.deleted)
	b.mu.Unlock()
	if deleted != 1 {
		t.Errorf("%d sandboxes deleted after the tar failed, want the one made", deleted)
	}
	if list, _ := s.List(ctx, "alpha", runs.ListOptions{}); len(list.Runs) != 0 || len(model.Requests()) != 0 {
		t.Errorf("refused creates left %d runs and %d model calls", len(list.Runs), len(model.Requests()))
	}
}

// TestServiceSecrets: secrets are the team's, sealed, and never listed
// with their value.
func TestServiceSecrets(t *testing.T) {
	s, _ := newService(t, fake.NewServer(t))
	ctx := context.Background()
	if _, err := s.PutSecret(ctx, "alpha", "bad-name", "x"); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a bad name: %v, want ErrInvalid", err)
	}
	if _, err := s.PutSecret(ctx, "alpha", "KEY", ""); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("an empty value: %v, want ErrInvalid", err)
	}
	if _, err := s.PutSecret(ctx, "alpha", "KEY", "sk-alpha"); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Secret(ctx, "alpha", "KEY"); err != nil || v != "sk-alpha" {
		t.Errorf("Secret = %q, %v", v, err)
	}
	if _, err := s.Secret(ctx, "beta", "KEY"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another team's secret: %v, want ErrNotFound", err)
	}
	if secs, err := s.ListSecrets(ctx, "alpha"); err != nil || len(secs) != 1 || secs[0].Name != "KEY" {
		t.Errorf("ListSecrets = %+v, %v", secs, err)
	}
	if err := s.DeleteSecret(ctx, "beta", "KEY"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another team deleting the secret: %v, want ErrNotFound", err)
	}
	if err := s.DeleteSecret(ctx, "alpha", "KEY"); err != nil {
		t.Fatal(err)
	}
}

// TestWebhookSignature: a signature verifies under its secret and body
// only, and not once it is old.
func TestWebhookSignature(t *testing.T) {
	body := []byte(`{"event":"run.idle"}`)
	now := time.Now()
	sig := runs.SignWebhook("whsec", now, body)
	if err := runs.VerifyWebhook("whsec", sig, body, now, time.Minute); err != nil {
		t.Errorf("verify: %v", err)
	}
	for _, tc := range []struct {
		name, secret string
		body         []byte
		at           time.Time
	}{
		{"another secret", "other", body, now},
		{"another body", "whsec", []byte(`{}`), now},
		{"a replay", "whsec", body, now.Add(time.Hour)},
	} {
		if runs.VerifyWebhook(tc.secret, sig, tc.body, tc.at, time.Minute) == nil {
			t.Errorf("%s verifies", tc.name)
		}
	}
}

// TestServiceModelFailureWording: a failed call to the operator's own
// model endpoint tells the tenant its status and a reference, never the
// endpoint's URL (it may be an internal address) nor the reply's body.
func TestServiceModelFailureWording(t *testing.T) {
	model := fake.NewServer(t, fake.Error(500, "internal page of proxy.corp.internal").Forever())
	s, _ := newService(t, model)
	ctx := context.Background()
	run, err := s.Create(ctx, "alpha", api.CreateRun{Input: "hi"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	evs, run := settle(t, s, "alpha", run.ID, 0)
	if run.Status != api.RunFailed || !strings.Contains(run.Error, "HTTP 500") || !strings.Contains(run.Error, "reference ref_") {
		t.Fatalf("run = %+v, want failed with the status and a reference", run)
	}
	host := strings.TrimPrefix(model.URL, "http://")
	read := run.Error
	for _, ev := range evs {
		read += "\n" + string(ev.Data)
	}
	for _, leak := range []string{host, "proxy.corp.internal"} {
		if strings.Contains(read, leak) {
			t.Errorf("the tenant reads %q in the run or its events:\n%s", leak, read)
		}
	}
}
