package server

import (
	"encoding/json"
	"net/http"
	"sync"

	"github.com/cove-sandbox/cove/server/internal/openapi"
)

// routeDocs is the API's route table, the one list of its routes (a test
// checks that it and the routes the server registers are the same set),
// and fieldDocs the descriptions of its fields (server/internal/openapi).
var (
	routeDocs = openapi.Routes
	fieldDocs = openapi.FieldDocs
)

var (
	openapiOnce sync.Once
	openapiDoc  []byte
)

// openapi serves the OpenAPI 3 document built from routeDocs and the api
// package's types.
func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	openapiOnce.Do(func() { openapiDoc, _ = json.MarshalIndent(buildOpenAPI(), "", "  ") })
	w.Header().Set("Content-Type", "application/json")
	w.Write(openapiDoc)
}

// buildOpenAPI is the document of routeDocs.
func buildOpenAPI() map[string]any { return openapi.Build(routeDocs, fieldDocs) }
