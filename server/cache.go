package server

import (
	"context"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/store"
)

// cachedStore keeps sandbox records in memory in front of the store:
// every request to a sandbox reads its record, and a SQLite read was a
// good part of an exec's time through the API. Writes go through and
// update the cache, so it is exact as long as this server is the store's
// only writer, which it must be anyway (its lifecycle loop and metering
// assume it).
type cachedStore struct {
	store.Store
	mu   sync.Mutex
	recs map[string]store.Sandbox
	// epoch counts writes. A read that missed caches what it read only
	// if no write came between its store read and now: otherwise it may
	// hold a record the write replaced or deleted, and caching that would
	// serve it until the next write.
	epoch uint64
}

func newCachedStore(st store.Store) *cachedStore {
	return &cachedStore{Store: st, recs: map[string]store.Sandbox{}}
}

func (c *cachedStore) GetSandbox(ctx context.Context, teamID, id string) (store.Sandbox, error) {
	c.mu.Lock()
	rec, ok := c.recs[id]
	c.mu.Unlock()
	if ok {
		if teamID != "" && rec.TeamID != teamID {
			// Another team's: ask the store, which words the error.
			return c.Store.GetSandbox(ctx, teamID, id)
		}
		return rec, nil
	}
	c.mu.Lock()
	epoch := c.epoch
	c.mu.Unlock()
	rec, err := c.Store.GetSandbox(ctx, teamID, id)
	if err == nil {
		c.mu.Lock()
		if c.epoch == epoch {
			if len(c.recs) > 100000 {
				clear(c.recs)
			}
			c.recs[id] = rec
		}
		c.mu.Unlock()
	}
	return rec, err
}

func (c *cachedStore) PutSandbox(ctx context.Context, s store.Sandbox) error {
	c.forget(s.ID)
	err := c.Store.PutSandbox(ctx, s)
	c.forget(s.ID)
	return err
}

func (c *cachedStore) DeleteSandbox(ctx context.Context, id string) error {
	c.forget(id)
	err := c.Store.DeleteSandbox(ctx, id)
	c.forget(id)
	return err
}

func (c *cachedStore) TouchSandbox(ctx context.Context, id string, t time.Time) error {
	err := c.Store.TouchSandbox(ctx, id, t)
	c.mu.Lock()
	if rec, ok := c.recs[id]; ok && t.After(rec.LastActivity) {
		rec.LastActivity = t
		c.recs[id] = rec
	}
	c.mu.Unlock()
	if err != nil && err != context.Canceled {
		c.forget(id)
	}
	return err
}

// forget drops id's record and, as every write calls it before and
// after writing, keeps a read that overlaps the write from caching.
func (c *cachedStore) forget(id string) {
	c.mu.Lock()
	delete(c.recs, id)
	c.epoch++
	c.mu.Unlock()
}

var _ store.Store = (*cachedStore)(nil)
