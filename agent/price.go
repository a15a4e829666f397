package agent

import "strings"

// Price is what a model costs, in USD per million tokens.
type Price struct {
	Input       float64 `json:"input"`
	CachedInput float64 `json:"cached_input"`
	Output      float64 `json:"output"`
}

// DefaultPrices are OpenAI's list prices (standard tier, USD per 1M
// tokens) as published on openai.com/api/pricing in late 2025. They are an
// estimate: override them with RunConfig.Prices (or `cove run --prices`).
var DefaultPrices = map[string]Price{
	"gpt-5.1":      {Input: 1.25, CachedInput: 0.125, Output: 10},
	"gpt-5":        {Input: 1.25, CachedInput: 0.125, Output: 10},
	"gpt-5-codex":  {Input: 1.25, CachedInput: 0.125, Output: 10},
	"gpt-5-mini":   {Input: 0.25, CachedInput: 0.025, Output: 2},
	"gpt-5-nano":   {Input: 0.05, CachedInput: 0.005, Output: 0.40},
	"gpt-4.1":      {Input: 2, CachedInput: 0.50, Output: 8},
	"gpt-4.1-mini": {Input: 0.40, CachedInput: 0.10, Output: 1.60},
	"gpt-4.1-nano": {Input: 0.10, CachedInput: 0.025, Output: 0.40},
	"gpt-4o":       {Input: 2.50, CachedInput: 1.25, Output: 10},
	"gpt-4o-mini":  {Input: 0.15, CachedInput: 0.075, Output: 0.60},
	"o3":           {Input: 2, CachedInput: 0.50, Output: 8},
	"o4-mini":      {Input: 1.10, CachedInput: 0.275, Output: 4.40},

	// The 5.1 family's variants, so a server's default among them has
	// a cost.
	"gpt-5.1-codex":       {Input: 1.25, CachedInput: 0.125, Output: 10},
	"gpt-5.1-codex-mini":  {Input: 0.25, CachedInput: 0.025, Output: 2},
	"gpt-5.1-chat-latest": {Input: 1.25, CachedInput: 0.125, Output: 10},
	"gpt-5-chat-latest":   {Input: 1.25, CachedInput: 0.125, Output: 10},
}

// Cost estimates what usage of model cost in USD, looking model up in
// table first and DefaultPrices second. A dated name ("gpt-4o-2024-08-06")
// takes the price of its undated name. ok is false when the model
// has no price.
func Cost(model string, u Usage, table map[string]Price) (usd float64, ok bool) {
	p, ok := lookupPrice(model, table)
	if !ok {
		p, ok = lookupPrice(model, DefaultPrices)
	}
	if !ok {
		return 0, false
	}
	cached := min(u.CachedInputTokens, u.InputTokens)
	usd = (float64(u.InputTokens-cached)*p.Input + float64(cached)*p.CachedInput + float64(u.OutputTokens)*p.Output) / 1e6
	return usd, true
}

func lookupPrice(model string, table map[string]Price) (Price, bool) {
	if p, ok := table[model]; ok {
		return p, true
	}
	best := ""
	for name := range table {
		// Only a date suffix inherits the price: gpt-5-pro is not gpt-5.
		rest, ok := strings.CutPrefix(model, name+"-")
		if ok && rest != "" && rest[0] >= '0' && rest[0] <= '9' && len(name) > len(best) {
			best = name
		}
	}
	if best == "" {
		return Price{}, false
	}
	return table[best], true
}
