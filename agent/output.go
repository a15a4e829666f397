package agent

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// OutputType asks the model for a final answer that is JSON matching a
// schema (the APIs' structured outputs); Result.Decode reads it.
type OutputType struct {
	// Name names the format to the model ("triage_report").
	Name   string
	Schema map[string]any
	// Strict asks the API to enforce the schema exactly (every property
	// required, no others), as OutputFor's schemas are written for.
	Strict bool
}

// OutputFor is the OutputType of Go type T: its exported fields, named as
// encoding/json names them, all required, nothing else allowed, so the
// API's strict mode accepts the schema.
func OutputFor[T any](name string) *OutputType {
	var zero T
	return &OutputType{Name: name, Schema: jsonSchema(reflect.TypeOf(zero)), Strict: true}
}

// Decode reads a run's final output into v (for agents with an
// OutputType). ErrInvalid when the output is not the JSON v needs.
func (r *Result) Decode(v any) error {
	if err := json.Unmarshal([]byte(r.Output), v); err != nil {
		return fmt.Errorf("the model's final output is not the JSON asked for (%v): %w", err, sandbox.ErrInvalid)
	}
	return nil
}

var timeType = reflect.TypeOf(time.Time{})

// jsonSchema is the strict-mode JSON schema of a Go type.
func jsonSchema(t reflect.Type) map[string]any {
	if t == timeType {
		return map[string]any{"type": "string", "format": "date-time"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		s := jsonSchema(t.Elem())
		return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": jsonSchema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": jsonSchema(t.Elem())}
	case reflect.Struct:
		props := map[string]any{}
		required := []string{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			s := jsonSchema(f.Type)
			if d := f.Tag.Get("description"); d != "" {
				s["description"] = d
			}
			props[name] = s
			required = append(required, name)
		}
		return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
	}
	return map[string]any{}
}
