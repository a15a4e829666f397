package trace_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
	"github.com/cove-sandbox/cove/trace"
)

type oneCall struct{ n int }

func (m *oneCall) Name() string { return "test-model" }
func (m *oneCall) Respond(ctx context.Context, req agent.ModelRequest, _ func(string)) (*agent.ModelResponse, error) {
	m.n++
	if m.n == 1 {
		return &agent.ModelResponse{Output: []agent.Item{{Type: agent.ItemToolCall, CallID: "c1", Name: "run", Arguments: `{}`}}}, nil
	}
	return &agent.ModelResponse{Output: []agent.Item{{Type: agent.ItemMessage, Role: agent.RoleAssistant, Content: []agent.Content{{Type: agent.ContentText, Text: "ok"}}}}}, nil
}

// runCap gives a tool that runs `true` in the session.
type runCap struct{}

func (runCap) Name() string { return "run" }
func (runCap) Bind(ctx context.Context, env agent.SandboxEnv) (agent.Binding, error) {
	return agent.Binding{Tools: []agent.Tool{agent.FunctionTool{Name: "run", Fn: func(ctx context.Context, _ json.RawMessage) (string, error) {
		_, err := env.Session.Exec(ctx, sandbox.ExecRequest{Cmd: "true"})
		return "ran", err
	}}}}, nil
}

// TestOTLPExport runs an agent with OTEL_EXPORTER_OTLP_ENDPOINT pointing
// at a collector stand-in and checks the spans a user would look for.
func TestOTLPExport(t *testing.T) {
	var mu sync.Mutex
	var names []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Write(b)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	ctx := context.Background()
	shutdown, err := trace.Setup(ctx, "cove-test")
	if err != nil {
		t.Fatal(err)
	}
	a := &agent.Agent{Name: "traced", Model: &oneCall{}, Sandbox: &agent.SandboxAgent{Capabilities: []agent.Capability{runCap{}}}}
	rt := fake.New()
	rt.Script("true", "", 0)
	if _, err := (&agent.Runner{}).Run(ctx, a, "go", agent.RunConfig{Sandbox: &agent.SandboxRunConfig{Runtime: rt}}); err != nil {
		t.Fatal(err)
	}
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"agent.run", "agent.turn", "model.call", "agent.tool", "sandbox.exec"} {
		if !slices.Contains(names, want) {
			t.Errorf("exported spans %s lack %q", strings.Join(names, ","), want)
		}
	}
}

func TestOffWithoutEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	if trace.Enabled() {
		t.Fatal("Enabled with no endpoint")
	}
	shutdown, err := trace.Setup(context.Background(), "x")
	if err != nil || shutdown(context.Background()) != nil {
		t.Fatalf("Setup off: %v", err)
	}
}
