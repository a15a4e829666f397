package sandboxtool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// fields are a tool call's JSON arguments by name. Each getter says which
// field was wrong and what it wants, since the model reads the error and
// retries. Like the SDK's pydantic models they ignore unknown fields and
// take numbers and booleans sent as strings ("1000", "true"), which
// models sometimes produce.
type fields struct {
	tool string
	m    map[string]json.RawMessage
}

func parseObject(tool, raw, example string) (fields, error) {
	f := fields{tool: tool}
	if strings.TrimSpace(raw) == "" {
		raw = "{}"
	}
	if err := json.Unmarshal([]byte(raw), &f.m); err != nil || f.m == nil {
		if err == nil {
			err = fmt.Errorf("got null")
		}
		return f, fmt.Errorf("%s: the arguments are not a JSON object (%v); send one such as %s: %w", tool, err, example, sandbox.ErrInvalid)
	}
	return f, nil
}

// get returns the field's JSON, nil when it is absent or null (the SDK's
// defaults apply to both).
func (f fields) get(name string) json.RawMessage {
	v := bytes.TrimSpace(f.m[name])
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	return v
}

func (f fields) wrong(name, want string) error {
	return fmt.Errorf("%s: %q must be %s, got %s: %w", f.tool, name, want, f.get(name), sandbox.ErrInvalid)
}

func (f fields) str(name string) (string, error) {
	v := f.get(name)
	if v == nil {
		return "", nil
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", f.wrong(name, "a string")
	}
	return s, nil
}

func (f fields) boolean(name string, def bool) (bool, error) {
	v := f.get(name)
	if v == nil {
		return def, nil
	}
	var b bool
	if json.Unmarshal(v, &b) == nil {
		return b, nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		if b, err := strconv.ParseBool(s); err == nil {
			return b, nil
		}
	}
	return false, f.wrong(name, "true or false")
}

// integer returns a whole number; ok is false when the field is absent.
func (f fields) integer(name string) (n int64, ok bool, err error) {
	v := f.get(name)
	if v == nil {
		return 0, false, nil
	}
	if v[0] == '"' {
		var s string
		if json.Unmarshal(v, &s) != nil {
			return 0, false, f.wrong(name, "an integer")
		}
		v = []byte(strings.TrimSpace(s))
	}
	var x float64
	if json.Unmarshal(v, &x) != nil || x != math.Trunc(x) || math.Abs(x) > 1<<53 {
		return 0, false, f.wrong(name, "an integer")
	}
	return int64(x), true, nil
}

// yield reads yield_time_ms, clamped to the SDK's 250..30000 ms: a wait
// out of range is adjusted rather than refused, so the call still runs.
func (f fields) yield(def time.Duration) (time.Duration, error) {
	ms, ok, err := f.integer("yield_time_ms")
	if err != nil || !ok {
		return clampYield(def), err
	}
	ms = min(max(ms, 0), int64(maxYield/time.Millisecond))
	return clampYield(time.Duration(ms) * time.Millisecond), nil
}

// maxTokens reads max_output_tokens; 0 means absent.
func (f fields) maxTokens() (int, error) {
	n, ok, err := f.integer("max_output_tokens")
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return 0, nil
	case n < 1:
		return 0, f.wrong("max_output_tokens", "at least 1 (or left out for the default)")
	}
	return int(min(n, math.MaxInt32)), nil
}
