package runs

import (
	"context"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/api"
)

// maxUsagePages bounds the pages of runs ModelUsage reads (100 runs a
// page).
const maxUsagePages = 1000

// ModelUsage sums the model use of team's runs made in [from, to): in
// all, and per UTC day made (keyed 2006-01-02). A run counts whole on
// the day it was made, with its use so far.
func (s *Service) ModelUsage(ctx context.Context, team string, from, to time.Time) (api.ModelUsage, map[string]*api.ModelUsage, error) {
	var total api.ModelUsage
	days := map[string]*api.ModelUsage{}
	after := ""
	for range maxUsagePages {
		page, err := s.List(ctx, team, ListOptions{After: after, Limit: 100})
		if err != nil {
			return total, nil, fmt.Errorf("summing the model use of team %s: %w", team, err)
		}
		for _, r := range page.Runs {
			if r.CreatedAt.Before(from) {
				return total, days, nil // newest first: the rest are older
			}
			if !r.CreatedAt.Before(to) {
				continue
			}
			total.Add(r.Usage, r.CostUSD)
			d := r.CreatedAt.UTC().Format(time.DateOnly)
			if days[d] == nil {
				days[d] = &api.ModelUsage{}
			}
			days[d].Add(r.Usage, r.CostUSD)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	return total, days, nil
}
