package runtimes

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/sandbox/remote"
)

func TestDataDir(t *testing.T) {
	t.Setenv("COVE_HOME", "/srv/cove")
	if got := DataDir("/x"); got != "/x" {
		t.Errorf("DataDir with --state-dir = %q, want /x", got)
	}
	if got := DataDir(""); got != "/srv/cove" {
		t.Errorf("DataDir with COVE_HOME = %q, want /srv/cove", got)
	}
	t.Setenv("COVE_HOME", "")
	if got := DataDir(""); !filepath.IsAbs(got) || !strings.HasSuffix(got, "cove") {
		t.Errorf("DataDir by default = %q, want an absolute .../cove", got)
	}
}

// TestAgentRuntimeServer: cove run's runtime is the server's when
// --server or COVE_SERVER names one, and says so; without a key it fails
// saying which variable to set.
func TestAgentRuntimeServer(t *testing.T) {
	t.Setenv("COVE_SERVER", "http://127.0.0.1:7300")
	t.Setenv("COVE_API_KEY", "cove_test")
	for _, flag := range []string{"", "http://127.0.0.1:7301"} {
		rt, kind, err := AgentRuntime(t.TempDir(), flag)
		if _, ok := rt.(*remote.Runtime); err != nil || !ok || kind != Remote {
			t.Errorf("AgentRuntime(--server %q) = %T, %v, %v; want the remote runtime", flag, rt, kind, err)
		}
	}
	if rt, err := SandboxRuntime(t.TempDir(), ""); err != nil {
		t.Errorf("SandboxRuntime with COVE_SERVER: %v", err)
	} else if _, ok := rt.(*remote.Runtime); !ok {
		t.Errorf("SandboxRuntime with COVE_SERVER = %T, want the remote runtime", rt)
	}
	t.Setenv("COVE_API_KEY", "")
	if _, _, err := AgentRuntime(t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), "COVE_API_KEY is not set") {
		t.Errorf("AgentRuntime with a server and no key: %v, want COVE_API_KEY is not set", err)
	}
	if _, err := APIClient(); err == nil || !strings.Contains(err.Error(), "set COVE_SERVER") {
		t.Errorf("APIClient with no key: %v, want it to say what to set", err)
	}
}

// TestAgentRuntimeMachine: without a server, cove run's runtime is this
// machine's, isolated when the local runtime works here.
func TestAgentRuntimeMachine(t *testing.T) {
	t.Setenv("COVE_SERVER", "")
	t.Setenv("COVE_POOL", "")
	home := t.TempDir()
	rt, kind, err := AgentRuntime(home, "")
	if err != nil {
		t.Fatal(err)
	}
	_, fallback, err := Machine(home)
	if err != nil {
		t.Fatal(err)
	}
	want := Isolated
	if fallback != nil {
		want = Unisolated
	}
	if kind != want || rt == nil {
		t.Errorf("AgentRuntime without a server: kind %v, want %v (local runtime: %v)", kind, want, fallback)
	}
}
