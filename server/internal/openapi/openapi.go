// Package openapi builds the OpenAPI 3 document of the Cove API from a
// table of routes and the api package's types.
package openapi

import (
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/api"
)

// Route documents one route for the OpenAPI document.
type Route struct {
	Pattern string // as registered: "METHOD /path/{param}" or "/path" for any method
	Summary string
	Query   []string // query parameters, "name: description"
	Request any      // JSON body type (a zero value), or a content type string
	// Response is the JSON body type, a content type string, or nil for
	// 204.
	Response any
	Status   int  // success status; 0 means 200
	Public   bool // no API key
}

// The content types of non-JSON bodies.
const (
	NDJSON    = "application/x-ndjson"
	Octets    = "application/octet-stream"
	Tar       = "application/x-tar"
	WebSocket = "websocket"
	Any       = "*/*"
)

var pathParam = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\{([a-z]+)(\.\.\.)?\}`) })

// docPath turns a mux pattern into an OpenAPI path and method ("" for
// every method).
func docPath(pattern string) (method, path string) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		method, path = "", pattern
	}
	if strings.HasSuffix(path, "/") {
		path += "{path}"
	}
	return method, pathParam().ReplaceAllString(path, "{$1}")
}

// Build is the OpenAPI 3 document of routes; fieldDocs adds to the
// schema of a field, by "Type.field".
func Build(routes []Route, fieldDocs map[string]map[string]any) map[string]any {
	schemas := map[string]any{}
	paths := map[string]map[string]any{}
	errResp := map[string]any{"description": "error", "content": map[string]any{"application/json": map[string]any{"schema": schemaOf(reflect.TypeOf(api.Error{}), schemas, fieldDocs)}}}
	for _, d := range routes {
		method, path := docPath(d.Pattern)
		op := map[string]any{"summary": d.Summary, "responses": map[string]any{}}
		if !d.Public {
			op["security"] = []any{map[string]any{"bearer": []any{}}, map[string]any{"apiKey": []any{}}}
		}
		var params []any
		for _, m := range pathParam().FindAllStringSubmatch(path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		for _, q := range d.Query {
			name, desc, _ := strings.Cut(q, ": ")
			params = append(params, map[string]any{"name": name, "in": "query", "description": desc, "schema": map[string]any{"type": "string"}})
		}
		if params != nil {
			op["parameters"] = params
		}
		if d.Request != nil {
			op["requestBody"] = map[string]any{"content": content(d.Request, schemas, fieldDocs)}
		}
		status := d.Status
		if status == 0 {
			status = 200
			if d.Response == nil {
				status = 204
			}
		}
		resp := map[string]any{"description": http.StatusText(status)}
		if d.Response != nil && d.Response != WebSocket {
			resp["content"] = content(d.Response, schemas, fieldDocs)
		}
		rs := op["responses"].(map[string]any)
		rs[itoa(status)] = resp
		rs["default"] = errResp
		if paths[path] == nil {
			paths[path] = map[string]any{}
		}
		methods := []string{strings.ToLower(method)}
		if method == "" {
			methods = []string{"get", "post", "put", "patch", "delete"}
		}
		for _, m := range methods {
			paths[path][m] = op
		}
	}
	return map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{"title": "Cove API", "version": "1",
			"description": "Sandboxes for AI agents, self-hosted. Errors are {code, message, request_id} with the HTTP status of their code."},
		"paths": paths,
		"components": map[string]any{
			"schemas": schemas,
			"securitySchemes": map[string]any{
				"bearer": map[string]any{"type": "http", "scheme": "bearer", "description": "Authorization: Bearer cove_..."},
				"apiKey": map[string]any{"type": "apiKey", "in": "header", "name": "X-API-Key"},
			},
		},
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func content(body any, schemas map[string]any, fieldDocs map[string]map[string]any) map[string]any {
	if ct, ok := body.(string); ok {
		schema := map[string]any{"type": "string", "format": "binary"}
		if ct == NDJSON {
			schema = map[string]any{"$ref": "#/components/schemas/ExecEvent"}
			schemaOf(reflect.TypeOf(api.ExecEvent{}), schemas, fieldDocs)
		}
		return map[string]any{ct: map[string]any{"schema": schema}}
	}
	return map[string]any{"application/json": map[string]any{"schema": schemaOf(reflect.TypeOf(body), schemas, fieldDocs)}}
}

var timeType = reflect.TypeOf(time.Time{})

// schemaOf is the JSON schema of a Go type as encoding/json writes it;
// named structs go to components and are referenced.
func schemaOf(t reflect.Type, schemas map[string]any, fieldDocs map[string]map[string]any) map[string]any {
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == reflect.TypeOf(json.RawMessage{}):
		return map[string]any{"type": "object", "description": "an Agents SDK manifest"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		s := schemaOf(t.Elem(), schemas, fieldDocs)
		return map[string]any{"allOf": []any{s}, "nullable": true}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "format": "byte"}
		}
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), schemas, fieldDocs)}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem(), schemas, fieldDocs)}
	case reflect.Interface:
		return map[string]any{}
	case reflect.Struct:
		name := t.Name()
		if name != "" {
			if _, done := schemas[name]; done {
				return map[string]any{"$ref": "#/components/schemas/" + name}
			}
			schemas[name] = map[string]any{} // placeholder against recursion
		}
		props := map[string]any{}
		var required []string
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			fname, opts, _ := strings.Cut(tag, ",")
			if fname == "" {
				fname = f.Name
			}
			fs := schemaOf(f.Type, schemas, fieldDocs)
			if doc, ok := fieldDocs[name+"."+fname]; ok {
				for k, v := range doc {
					fs[k] = v
				}
			}
			props[fname] = fs
			if !strings.Contains(opts, "omitempty") && f.Type.Kind() != reflect.Pointer {
				required = append(required, fname)
			}
		}
		s := map[string]any{"type": "object", "properties": props}
		if len(required) > 0 {
			s["required"] = required
		}
		if name == "" {
			return s
		}
		schemas[name] = s
		return map[string]any{"$ref": "#/components/schemas/" + name}
	}
	return map[string]any{}
}
