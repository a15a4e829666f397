// Package runs is agent runs as a service: the harness (package agent)
// working in one of a team's sandboxes, driven by a server instead of a
// CLI. A run's events go to a log that clients follow and replay from any
// event id; its RunState is saved at every turn boundary, so a restarted
// server goes on with it; approvals and follow-up messages arrive as
// calls; a webhook hears when it stops. Team secrets (the model keys runs
// use) live here too. The package knows no HTTP: server's handlers
// translate to it, and every method takes the caller's team and returns
// the sandbox package's sentinel errors (sandbox.ErrNotFound, ErrInvalid,
// ErrState, ...).
//
// A run's life is a series of segments, each one Runner call (Run,
// Resume after approvals, Continue with a follow-up message), one at a
// time. Between segments the run is waiting, idle, failed or cancelled
// and costs nothing but its record.
package runs

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/egress"
	"github.com/cove-sandbox/cove/fleet/lease"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Sandboxes is what runs needs of the sandbox service (fleet.Fleet): a
// sandbox to work in, made or reopened for a team.
type Sandboxes interface {
	// Create makes and records a running sandbox for team from req, its
	// manifest applied; on error nothing is left behind. Errors are the
	// sandbox sentinels (ErrInvalid for a bad request, ErrLimit over a
	// quota, ...).
	Create(ctx context.Context, team string, req api.CreateSandbox) (store.Sandbox, sandbox.Session, error)
	// Open returns the live session of team's sandbox id, resuming it
	// when it was stopped, and marks activity on it: ErrNotFound when the
	// team has no such sandbox.
	Open(ctx context.Context, team, id string) (sandbox.Session, error)
	// Delete deletes team's sandbox id: Create uses it to take back a
	// sandbox it made when the run's workspace tar does not load.
	// ErrNotFound when the team has no such sandbox.
	Delete(ctx context.Context, team, id string) error
	// Stop stops team's sandbox id and keeps its disk (Open resumes
	// it): a run that failed before its model ever answered stops the
	// sandbox it made, so nothing is left running for it.
	Stop(ctx context.Context, team, id string) (store.Sandbox, error)
	// Begin counts the sandbox id in use until end is called, so a
	// working agent keeps its sandbox from idling out between its
	// commands.
	Begin(id string) (end func())
}

// ModelConfig is the operator's model endpoint, which runs use unless
// they name another.
type ModelConfig struct {
	// BaseURL is the server's model endpoint and APIKey its key: cove
	// serve takes them from $OPENAI_BASE_URL and $OPENAI_API_KEY, and the
	// wiring fills in its model's default endpoint when none is named
	// (internal/app). The key is only ever sent to BaseURL.
	BaseURL, APIKey string
	// API is "responses" or "chat" ("" picks by endpoint); DefaultModel
	// is used when a run names none.
	API, DefaultModel string
	// Prices overrides the model price table for cost estimates.
	Prices map[string]agent.Price
	// HTTPClient makes the calls to BaseURL, the operator's own endpoint
	// (default http.DefaultClient). Calls to a base URL a run names, and
	// webhook deliveries, go where a tenant says and use the outbound
	// policy instead (Config.Egress).
	HTTPClient *http.Client
}

// Config configures a Service. Store and Sandboxes are required.
type Config struct {
	Store     store.Store
	Sandboxes Sandboxes
	// Models makes a run's model; nil refuses every run (a server set up
	// without a model).
	Models ModelFactory
	// Model is the operator's endpoint.
	Model ModelConfig
	// Egress vets the connections made for tenants (a run's
	// agent.base_url, webhooks); nil is the default policy.
	Egress *egress.Policy
	// SecretKey seals team secrets (32 bytes); nil means the key in
	// DataDir/secret.key, made on first use.
	SecretKey []byte
	DataDir   string
	// Redact rewords text a tenant reads in a run's log or record (a
	// failure's message) when it holds detail of the host's; nil keeps
	// text as it is.
	Redact func(text string) string
	Logger *slog.Logger
	// Now is the clock (tests move it).
	Now func() time.Time
	// Lease, when set, is shared by every process over this store: each
	// run is worked on by the one holding its lease (replicas.go). Nil:
	// this process is the only one. Holder names this process in it
	// (lease.Holder() unless set); LeaseTTL is how long a run's lease
	// outlives a process that stopped renewing it (lease.DefaultTTL).
	Lease    store.Leaser
	Holder   string
	LeaseTTL time.Duration
}

// Events the service adds to the harness's own in a run's log.
const (
	// EventUserMessage is each input of the run (the first and every
	// follow-up), so a replayed log shows the whole conversation.
	EventUserMessage agent.EventType = "user_message"
	// EventRunStatus is each change of the run's status.
	EventRunStatus agent.EventType = "run_status"
)

// runEvent is an event of a run's log: the harness's, or the service's
// with Status.
type runEvent struct {
	agent.Event
	Status string `json:"status,omitempty"`
}

// flushInterval is how often run events reach the store: followers see
// them at once from memory; the store is for replays and restarts.
const flushInterval = 100 * time.Millisecond

// OutputCap bounds the output kept in a run's log per tool call: a
// command that floods its output must not fill the server's disk or the
// browser of whoever watches.
const OutputCap = 1 << 20

// runConfig is how a run was asked for, kept in its record.
type runConfig struct {
	Agent         api.RunAgent `json:"agent"`
	WebhookURL    string       `json:"webhook_url,omitempty"`
	WebhookSecret string       `json:"webhook_secret,omitempty"`
	// MadeSandbox is true when the run made its sandbox (false for a
	// sandbox_id the caller chose, which a run never stops).
	MadeSandbox bool `json:"made_sandbox,omitempty"`
}

// runSummary is the part of a run's record its view shows without
// reading the whole RunState (store.Run.Usage).
type runSummary struct {
	Usage     api.RunUsage      `json:"usage"`
	Cost      *float64          `json:"cost_usd,omitempty"`
	Approvals []api.RunApproval `json:"approvals,omitempty"`
}

// cancelledByUser is the error of a run cancelled through the API.
const cancelledByUser = "cancelled by the user; send a message to go on"

var (
	errRunCancelled = errors.New("the run was cancelled")
	errShutdown     = errors.New("the server is shutting down")
)

// Service runs agents. Create it with New, call Start once the server is
// ready (it goes on with the runs a previous server left working) and
// Close at the end.
//
// A run in memory holds the truth of its record until the store catches
// up (each checkpoint, each flushInterval), and Start takes over every
// run the store says is running: without Config.Lease the service
// assumes it is the only one working on its store's runs; with it,
// services sharing a store work each run in one of them (replicas.go).
type Service struct {
	cfg    Config
	log    *slog.Logger
	egress *egress.Policy
	hub    *runHub
	// done ends the flush loop; closeOnce closes it.
	done      chan struct{}
	closeOnce sync.Once
	loop      sync.WaitGroup

	// secretOnce loads the key that seals team secrets (secrets.go).
	secretOnce sync.Once
	sealer     cipher.AEAD
	secretErr  error
}

// New returns a service; it does nothing until Start.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Sandboxes == nil {
		return nil, fmt.Errorf("runs: a store and sandboxes are required: %w", sandbox.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Redact == nil {
		cfg.Redact = func(text string) string { return text }
	}
	if cfg.Holder == "" {
		cfg.Holder = lease.Holder()
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = lease.DefaultTTL
	}
	out := cfg.Egress
	if out == nil {
		var err error
		if out, err = egress.New(nil, nil); err != nil {
			return nil, err
		}
	}
	return &Service{cfg: cfg, log: cfg.Logger, egress: out, hub: newRunHub(), done: make(chan struct{})}, nil
}

// Start goes on with the runs a previous server left working, then
// writes run events to the store every flushInterval until Close. With
// Config.Lease it also renews the leases of the runs it works on every
// LeaseTTL/3, and looks for runs whose worker died every LeaseTTL.
func (s *Service) Start() {
	s.recoverRuns(context.Background())
	s.loop.Add(1)
	go func() {
		defer s.loop.Done()
		t := time.NewTicker(flushInterval)
		defer t.Stop()
		renew := time.NewTicker(s.cfg.LeaseTTL / 3)
		defer renew.Stop()
		if s.cfg.Lease == nil {
			renew.Stop()
		}
		rounds := 0
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				s.flushRuns(context.Background())
			case <-renew.C:
				s.renewRuns(context.Background())
				if rounds++; rounds%3 == 0 {
					s.recoverRuns(context.Background())
				}
			}
		}
	}()
}

// Close stops the segments in flight (their runs stay "running" in the
// store, to be resumed by the next server from their last turn), waits
// for them and for webhook deliveries, and writes what is left.
func (s *Service) Close() error {
	s.closeOnce.Do(func() { close(s.done) })
	s.loop.Wait()
	h := s.hub
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cancel(errShutdown)
	h.wg.Wait()
	s.flushRuns(context.Background())
	return nil
}

// runHub holds the runs this server is working on or that clients are
// following.
type runHub struct {
	mu     sync.Mutex
	runs   map[string]*liveRun
	closed bool
	// ctx ends (with errShutdown) when the service closes; segments and
	// webhook deliveries run under it, counted by wg.
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
}

// liveRun is a run in memory. While one exists it holds the truth of its
// record (rec); the store catches up at each checkpoint and flush.
type liveRun struct {
	id, team string
	// op serialises the run's control operations (start a segment,
	// decide approvals, cancel, finish a segment).
	op sync.Mutex

	mu  sync.Mutex
	rec store.Run
	sum runSummary
	// pending are events not yet in the store, in order; changed is
	// closed (and replaced) when an event is added or the status changes.
	pending []store.RunEvent
	changed chan struct{}
	running bool
	cancel  context.CancelCauseFunc
	done    chan struct{}
	// subs counts the callers using the run; an idle run with none and
	// nothing to flush is dropped from memory.
	subs     int
	outBytes map[string]int
	// deleted ends the feeds still following a run that was deleted.
	deleted bool
	// flushMu serialises writes of pending events.
	flushMu sync.Mutex
}

func newRunHub() *runHub {
	h := &runHub{runs: map[string]*liveRun{}}
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	return h
}

// add counts a goroutine of the hub in wg: false once the service is
// closing, when none may start.
func (h *runHub) add() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.wg.Add(1)
	return true
}

// acquire returns the live run of team's run id ("" for any team),
// loading it from the store when it is not in memory. Call release when
// done.
func (s *Service) acquire(ctx context.Context, team, id string) (*liveRun, error) {
	h := s.hub
	h.mu.Lock()
	lr, ok := h.runs[id]
	if ok {
		if lr.team != team && team != "" {
			h.mu.Unlock()
			return nil, fmt.Errorf("run %s %w", id, sandbox.ErrNotFound)
		}
		lr.mu.Lock()
		lr.subs++
		lr.mu.Unlock()
		h.mu.Unlock()
		if err := s.refresh(ctx, lr); err != nil {
			s.release(lr)
			return nil, err
		}
		return lr, nil
	}
	h.mu.Unlock()
	rec, err := s.cfg.Store.GetRun(ctx, team, id)
	if err != nil {
		return nil, err
	}
	return s.adopt(rec), nil
}

// adopt puts a run record in memory (or returns the run already there),
// acquired.
func (s *Service) adopt(rec store.Run) *liveRun {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	lr, ok := h.runs[rec.ID]
	if !ok {
		lr = &liveRun{id: rec.ID, team: rec.TeamID, rec: rec, changed: make(chan struct{}), outBytes: map[string]int{}}
		if len(rec.Usage) > 0 {
			_ = json.Unmarshal(rec.Usage, &lr.sum)
		}
		h.runs[rec.ID] = lr
	}
	lr.mu.Lock()
	lr.subs++
	lr.mu.Unlock()
	return lr
}

// release ends a use of a run; the last one of an idle run drops it from
// memory once its events are in the store.
func (s *Service) release(lr *liveRun) {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	lr.mu.Lock()
	defer lr.mu.Unlock()
	lr.subs--
	if lr.subs <= 0 && !lr.running && len(lr.pending) == 0 {
		delete(h.runs, lr.id)
	}
}

// live returns the run in memory, if it is.
func (s *Service) live(id string) *liveRun {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.hub.runs[id]
}

// emit adds an event to the run's log.
func (lr *liveRun) emit(ev runEvent) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	if ev.Type == agent.EventOutput {
		switch n := lr.outBytes[ev.CallID]; {
		case n > OutputCap:
			return // over, and said so
		case n+len(ev.Data) > OutputCap:
			ev.Data = ev.Data[:OutputCap-n] + "\n[cove: output past 1 MiB of this call is not kept in the run's log; the model got its own bounded copy]\n"
			lr.outBytes[ev.CallID] = OutputCap + 1
		default:
			lr.outBytes[ev.CallID] = n + len(ev.Data)
		}
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	lr.rec.LastEventID++
	lr.pending = append(lr.pending, store.RunEvent{RunID: lr.id, Seq: lr.rec.LastEventID, Type: string(ev.Type), Data: data})
	lr.notifyLocked()
}

func (lr *liveRun) notifyLocked() {
	close(lr.changed)
	lr.changed = make(chan struct{})
}

// stopped marks the run's segment over. It comes after the segment's
// last event: a feed that sees the run not working has had everything.
func (lr *liveRun) stopped() {
	lr.mu.Lock()
	lr.running = false
	lr.notifyLocked()
	lr.mu.Unlock()
}

// setStatus records a new status and logs it as an event.
func (lr *liveRun) setStatus(status, errMsg, text string) {
	lr.mu.Lock()
	lr.rec.Status, lr.rec.Error = status, errMsg
	lr.mu.Unlock()
	lr.emit(runEvent{Event: agent.Event{Type: EventRunStatus, Error: errMsg, Text: text}, Status: status})
}

// flush writes the run's pending events to the store.
func (s *Service) flush(ctx context.Context, lr *liveRun) error {
	lr.flushMu.Lock()
	defer lr.flushMu.Unlock()
	lr.mu.Lock()
	batch := append([]store.RunEvent(nil), lr.pending...)
	lr.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	if err := s.cfg.Store.AppendRunEvents(ctx, batch); err != nil {
		return fmt.Errorf("saving the events of run %s: %w", lr.id, err)
	}
	// Drop what was written. The list may have changed meanwhile (a
	// segment that lost its lease drops it whole), so by sequence number.
	last := batch[len(batch)-1].Seq
	lr.mu.Lock()
	i := 0
	for i < len(lr.pending) && lr.pending[i].Seq <= last {
		i++
	}
	lr.pending = lr.pending[i:]
	lr.mu.Unlock()
	return nil
}

// save writes the run's events, then its record.
func (s *Service) save(ctx context.Context, lr *liveRun) error {
	if err := s.flush(ctx, lr); err != nil {
		return err
	}
	lr.mu.Lock()
	lr.rec.UpdatedAt = s.cfg.Now()
	lr.rec.Usage, _ = json.Marshal(lr.sum)
	rec := lr.rec
	lr.mu.Unlock()
	if err := s.cfg.Store.PutRun(ctx, rec); err != nil {
		return fmt.Errorf("saving run %s: %w", lr.id, err)
	}
	return nil
}

// flushRuns writes every live run's pending events (the flush loop).
func (s *Service) flushRuns(ctx context.Context) {
	s.hub.mu.Lock()
	runs := make([]*liveRun, 0, len(s.hub.runs))
	for _, lr := range s.hub.runs {
		runs = append(runs, lr)
	}
	s.hub.mu.Unlock()
	for _, lr := range runs {
		if err := s.flush(ctx, lr); err != nil {
			s.log.Error("flushing run events", "run", lr.id, "err", err)
		}
	}
}

// invalid is an ErrInvalid that says what to fix.
func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, sandbox.ErrInvalid)...)
}

// newID returns prefix + 12 random hex digits.
func newID(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
