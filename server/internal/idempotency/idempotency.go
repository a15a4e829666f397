// Package idempotency makes the server's creates safe to retry: a create
// that carries an Idempotency-Key header is done at most once per team
// and key, whichever replica a retry reaches, and even when the replica
// that did it died before answering. Both front doors (/v1 and E2B's
// control plane) use it around their create.
//
// A request claims its key in the store (store.Idempotency) and renews
// the claim while it works; the sandbox it makes carries an own label
// (LabelKey: a hash of the key, which no tenant sees) before its record
// is written. The result is recorded on the key when the create is done.
// A replica that died mid-create stops renewing: once its hold lapses,
// the next request with the key takes the claim over and first looks
// for a sandbox of the team with the key's label, so a sandbox whose
// record was written is answered, never made twice.
package idempotency

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// LabelKey is the own label (fleet.OwnLabelPrefix) of a sandbox made
// with an idempotency key: its value is a hash of the team and key.
const LabelKey = "cove.idempotency"

// Timing of claims. A claim lasts hold unless renewed; its holder renews
// it every renewEvery, so a live request keeps it however long its
// create queues, and a dead replica's lapses within hold. A request
// that finds a key in flight waits up to waitInFlight for it to finish
// before answering 409.
var (
	hold         = 6 * time.Second
	renewEvery   = 2 * time.Second
	waitInFlight = 5 * time.Second
	pollEvery    = 100 * time.Millisecond
)

// Error is a refusal with its status and code; the front door writes
// it in its own error body.
type Error struct {
	Status        int
	Code, Message string
}

func (e *Error) Error() string { return e.Message }

// Keys claims idempotency keys in a store. The zero Keys (no store)
// refuses keys.
type Keys struct {
	store store.Store
	idem  store.Idempotency
}

// New returns Keys over st; a store that keeps no idempotency keys
// makes every request with a key a 400.
func New(st store.Store) *Keys {
	k := &Keys{store: st}
	k.idem, _ = st.(store.Idempotency)
	return k
}

// Read returns the request's idempotency key ("" for none), or an
// Error (400) for a key too long or of characters outside the set.
func Read(r *http.Request) (string, *Error) {
	vals := r.Header.Values(api.IdempotencyKeyHeader)
	if len(vals) == 0 {
		return "", nil
	}
	key := vals[0]
	bad := func(why string) *Error {
		return &Error{Status: http.StatusBadRequest, Code: api.CodeInvalid, Message: api.IdempotencyKeyHeader + ": " + why}
	}
	switch {
	case len(vals) > 1:
		return "", bad("give one key, not several")
	case key == "":
		return "", bad("the key is empty; send a unique key per create (a UUID), or no header")
	case len(key) > api.MaxIdempotencyKeyLen:
		return "", bad(fmt.Sprintf("the key is %d characters; the most is %d", len(key), api.MaxIdempotencyKeyLen))
	}
	for _, c := range key {
		if !keyChar(c) {
			return "", bad(fmt.Sprintf("character %q is not allowed; use letters, digits and -_.:+/=~ (a UUID)", c))
		}
	}
	return key, nil
}

func keyChar(c rune) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '-', '_', '.', ':', '+', '/', '=', '~':
		return true
	}
	return false
}

// Op is a claimed key: the create it guards runs between Begin and End.
// A nil *Op (no key) does nothing.
type Op struct {
	k                 *Keys
	team, key, holder string
	stop              context.CancelFunc
	done              chan struct{}
}

// Begin claims r's idempotency key for team's request req (front names
// the route; the request hash covers both). It returns:
//   - a nil Op, "" and nil when r has no key: create as usual;
//   - an Op when the key is the caller's: create with op.Labels() and
//     call op.End;
//   - the id of the sandbox the key already made: answer it again,
//     with IdempotentReplayedHeader;
//   - an Error to answer (400 bad key, 409 in flight, 422 reused).
//
// ctx should outlive the client (the create does).
func (k *Keys) Begin(ctx context.Context, r *http.Request, team, front string, req any) (*Op, string, error) {
	key, kerr := Read(r)
	if kerr != nil {
		return nil, "", kerr
	}
	if key == "" {
		return nil, "", nil
	}
	if k == nil || k.idem == nil {
		return nil, "", &Error{Status: http.StatusBadRequest, Code: api.CodeInvalid, Message: api.IdempotencyKeyHeader + ": this server's store keeps no idempotency keys; send the create without it"}
	}
	hash, err := Hash(front, req)
	if err != nil {
		return nil, "", err
	}
	op := &Op{k: k, team: team, key: key, holder: newHolder()}
	for waited := time.Duration(0); ; waited += pollEvery {
		c, err := k.idem.ClaimIdempotencyKey(ctx, team, key, hash, op.holder, hold)
		if err != nil {
			return nil, "", err
		}
		switch c.Status {
		case store.ClaimNew:
			op.renew()
			return op, "", nil
		case store.ClaimTakenOver:
			return op.takeOver(ctx)
		case store.ClaimDone:
			return nil, c.ResultID, nil
		case store.ClaimMismatch:
			return nil, "", &Error{Status: http.StatusUnprocessableEntity, Code: api.CodeIdempotencyMismatch,
				Message: fmt.Sprintf("%s %q was used with a different request; a key names one request: send a new key for a new create", api.IdempotencyKeyHeader, key)}
		}
		if waited >= waitInFlight {
			return nil, "", &Error{Status: http.StatusConflict, Code: api.CodeIdempotencyInFlight,
				Message: fmt.Sprintf("the first request with %s %q is still in progress; retry in a moment with the same key", api.IdempotencyKeyHeader, key)}
		}
		select {
		case <-ctx.Done():
			return nil, "", ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// takeOver: the key's first holder stopped renewing before it finished.
// If it recorded a sandbox, that is the key's result; else this request
// makes it.
func (op *Op) takeOver(ctx context.Context) (*Op, string, error) {
	page, _, err := op.k.store.ListSandboxes(ctx, store.SandboxFilter{TeamID: op.team, Labels: op.Labels(), Limit: 1})
	if err != nil {
		op.k.idem.ReleaseIdempotencyKey(context.WithoutCancel(ctx), op.team, op.key, op.holder)
		return nil, "", err
	}
	if len(page) == 0 {
		op.renew()
		return op, "", nil
	}
	id := page[0].ID
	if err := op.k.idem.FinishIdempotencyKey(ctx, op.team, op.key, op.holder, id); err != nil {
		return nil, "", err
	}
	return nil, id, nil
}

// Labels are the own labels the create puts on its sandbox (nil for no
// key).
func (op *Op) Labels() map[string]string {
	if op == nil {
		return nil
	}
	return Label(op.team, op.key)
}

// Label is the own label of a sandbox made by team with key.
func Label(team, key string) map[string]string {
	sum := sha256.Sum256([]byte(team + "\n" + key))
	return map[string]string{LabelKey: hex.EncodeToString(sum[:16])}
}

// Hash is the request hash of a create: its front door and its decoded
// body as JSON (so a retry need not send the same bytes, only the same
// request).
func Hash(front string, req any) (string, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(append([]byte(front+"\n"), body...))
	return hex.EncodeToString(sum[:]), nil
}

// renew keeps the claim held until End.
func (op *Op) renew() {
	ctx, cancel := context.WithCancel(context.Background())
	op.stop, op.done = cancel, make(chan struct{})
	go func() {
		defer close(op.done)
		t := time.NewTicker(renewEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// Lost (false): End's finish says so. An error: the next
			// tick tries again.
			if ok, err := op.k.idem.RenewIdempotencyKey(ctx, op.team, op.key, op.holder, hold); err == nil && !ok {
				return
			}
		}
	}()
}

// ErrLost: the claim lapsed while the create worked (the store was out
// of reach longer than a hold) and another request took the key over;
// the sandbox made must be deleted, the client told to retry.
var ErrLost = errors.New("idempotency claim lost")

// End records the create's outcome: id (when err is nil) as the key's
// result, or, the create having failed, the key released so a retry
// starts afresh. It returns err, or, when the key was lost to another
// request meanwhile, an Error (409) after undo deleted what was made.
func (op *Op) End(ctx context.Context, id string, err error, undo func()) error {
	if op == nil {
		return err
	}
	op.stop()
	<-op.done
	ctx = context.WithoutCancel(ctx)
	if err != nil {
		op.k.idem.ReleaseIdempotencyKey(ctx, op.team, op.key, op.holder)
		return err
	}
	ferr := op.k.idem.FinishIdempotencyKey(ctx, op.team, op.key, op.holder, id)
	if ferr == nil {
		return nil
	}
	if errors.Is(ferr, sandbox.ErrState) {
		undo()
		return &Error{Status: http.StatusConflict, Code: api.CodeIdempotencyInFlight,
			Message: fmt.Sprintf("another request with %s %q took it over while this one worked; retry with the same key", api.IdempotencyKeyHeader, op.key)}
	}
	// The store failed: the sandbox stands, and the next request with
	// the key finds it by its label once this claim lapses.
	return ferr
}

// Replayed marks an answer given again.
func Replayed(w http.ResponseWriter) { w.Header().Set(api.IdempotentReplayedHeader, "true") }

// Gone is the answer for a key whose sandbox has since been deleted.
func Gone(key, id string) *Error {
	return &Error{Status: http.StatusConflict, Code: api.CodeState,
		Message: fmt.Sprintf("%s %q made sandbox %s, which has since been deleted; send a new key to make another", api.IdempotencyKeyHeader, key, id)}
}

func newHolder() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}
