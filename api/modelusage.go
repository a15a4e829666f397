package api

// ModelUsage is what a team's agent runs used of their models (part of
// GET /v1/usage): the runs made in the period, counted whole on the day
// each was made.
type ModelUsage struct {
	Runs         int     `json:"runs"`
	Requests     int64   `json:"requests"`
	InputTokens  int64   `json:"input_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
	// UnpricedRuns counts runs whose model has no known price: their
	// tokens are counted, their cost is not.
	UnpricedRuns int `json:"unpriced_runs,omitempty"`
}

// Add adds one run's use to m.
func (m *ModelUsage) Add(u RunUsage, cost *float64) {
	m.Runs++
	m.Requests += u.Requests
	m.InputTokens += u.InputTokens
	m.CachedTokens += u.CachedTokens
	m.OutputTokens += u.OutputTokens
	if cost != nil {
		m.CostUSD += *cost
	} else if u.Requests > 0 {
		m.UnpricedRuns++
	}
}
