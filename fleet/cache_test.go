package fleet

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
	"github.com/cove-sandbox/cove/store"
)

// slowStore holds its sandbox records in a map; a GetSandbox can be made
// to stop between reading the record and returning it.
type slowStore struct {
	store.Store
	mu     sync.Mutex
	recs   map[string]store.Sandbox
	read   chan struct{} // closed by a held read once it has read
	resume chan struct{} // a held read returns once this is closed
}

func (s *slowStore) GetSandbox(ctx context.Context, teamID, id string) (store.Sandbox, error) {
	s.mu.Lock()
	rec, ok := s.recs[id]
	read, resume := s.read, s.resume
	s.read, s.resume = nil, nil
	s.mu.Unlock()
	if read != nil {
		close(read)
		<-resume
	}
	if !ok {
		return store.Sandbox{}, sandbox.ErrNotFound
	}
	return rec, nil
}

func (s *slowStore) DeleteSandbox(ctx context.Context, id string) error {
	s.mu.Lock()
	delete(s.recs, id)
	s.mu.Unlock()
	return nil
}

// TestCacheReadRacingDelete: a read that fetched a record before it was
// deleted (here by a peer sharing the store), and returns after, must
// not leave it cached: the sandbox would look alive to every later
// request. (The fleet caches no record at all; this holds it to that.)
func TestCacheReadRacingDelete(t *testing.T) {
	slow := &slowStore{recs: map[string]store.Sandbox{"sb-1": {ID: "sb-1", State: store.StateRunning}},
		read: make(chan struct{}), resume: make(chan struct{})}
	c, err := New(Config{Runtime: fake.New(), Store: slow})
	if err != nil {
		t.Fatal(err)
	}
	read, resume := slow.read, slow.resume
	done := make(chan error)
	go func() { _, err := c.Find(context.Background(), "sb-1"); done <- err }()
	<-read // the record is read, not yet returned
	// The peer's delete: straight to the store.
	if err := slow.DeleteSandbox(context.Background(), "sb-1"); err != nil {
		t.Fatal(err)
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatalf("the racing read: %v", err)
	}
	if rec, err := c.Find(context.Background(), "sb-1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("after the delete the cache still serves %+v (%v)", rec, err)
	}
}
