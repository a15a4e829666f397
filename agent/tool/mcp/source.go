package mcp

import (
	"context"
	"sync"

	"github.com/cove-sandbox/cove/agent"
)

// Source is an agent.ToolSource over MCP servers: the Runner connects
// them when a run starts and closes them when it ends.
type Source struct {
	servers []Server
	mu      sync.Mutex
	set     *Set
}

var _ agent.ToolSource = (*Source)(nil)

// NewSource returns a tool source for servers; nothing starts until the
// run asks for the tools.
func NewSource(servers ...Server) *Source { return &Source{servers: servers} }

// Tools implements agent.ToolSource.
func (s *Source) Tools(ctx context.Context) ([]agent.Tool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set == nil {
		set, err := Connect(ctx, s.servers...)
		if err != nil {
			return nil, err
		}
		s.set = set
	}
	return s.set.Tools(), nil
}

// Close implements agent.ToolSource.
func (s *Source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set == nil {
		return nil
	}
	err := s.set.Close()
	s.set = nil
	return err
}
