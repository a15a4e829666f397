// Package kubernetes_test deploys deploy/kubernetes, as the README says
// to, on the real test cluster: the server's image made by `cove image
// server`, two replicas on one PostgreSQL, the sandboxes as pods, the
// servers reached through their Service.
package kubernetes_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/cli"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/kube/imagetest"
	"github.com/cove-sandbox/cove/sandbox/kube/kubeimage"
	"github.com/cove-sandbox/cove/sandbox/kube/kubetest"
	"github.com/cove-sandbox/cove/sandbox/remote"
	"github.com/cove-sandbox/cove/store/postgres/pgtest"
)

// ns is the namespace deploy/kubernetes makes.
const ns = "cove"

func TestDeployOnCluster(t *testing.T) {
	c := kubetest.Start(t)
	// kube-proxy: the servers reach the API server at the kubernetes
	// Service (in-cluster configuration, as shipped), and the test
	// reaches them at theirs.
	if err := c.RouteServices(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dir := t.TempDir()

	// The server's image, from a static cove, as `make image` makes it.
	prog := buildCove(t, dir)
	importServerImage(t, c, prog, dir)
	importSandboxImage(t, c, dir)

	// PostgreSQL on the host, reached by the pods at the node's address.
	pg := pgtest.Start(t)
	dbURL, err := pg.CreateDatabase(ctx, "cove_deploy")
	if err != nil {
		t.Fatal(err)
	}
	addr := relay(t, c.NodeIP(), "unix", filepath.Join(pg.Dir, ".s.PGSQL.5432"))
	podURL := fmt.Sprintf("postgres://postgres@%s/cove_deploy?sslmode=disable", addr)

	// An admin key, made beforehand against the same database as the
	// README's `cove key create --admin --store` does.
	var out, errOut bytes.Buffer
	if err := cli.Run(ctx, []string{"key", "create", "--admin", "--store", dbURL}, &out, &errOut); err != nil {
		t.Fatalf("cove key create --admin: %v: %s", err, errOut.String())
	}
	adminKey := strings.TrimSpace(out.String())

	kubectl(t, c, "apply", "-k", ".")
	t.Cleanup(func() { kubectlErr(c, "delete", "-k", ".", "--wait=true", "--timeout=3m") })
	t.Cleanup(func() {
		if t.Failed() { // what the servers and the cluster said, before the delete
			for _, args := range [][]string{
				{"-n", ns, "get", "pods,pvc,secrets,networkpolicies", "-o", "wide"},
				{"-n", ns, "get", "events", "--sort-by=.lastTimestamp"},
				{"-n", ns, "logs", "-l", "app.kubernetes.io/component=server", "--tail=40", "--prefix"},
			} {
				out, _ := kubectlErr(c, args...)
				t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
			}
		}
	})
	keyFile := filepath.Join(dir, "secret-key")
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(key)), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, c, "-n", ns, "create", "secret", "generic", "cove-store", "--from-literal=url="+podURL)
	kubectl(t, c, "-n", ns, "create", "secret", "generic", "cove-secret-key", "--from-file=secret-key="+keyFile)
	kubectl(t, c, "-n", ns, "rollout", "status", "deployment/cove-server", "--timeout=10m")
	ips := serverPods(t, c)
	replicas := make([]string, len(ips))
	for i, ip := range ips {
		replicas[i] = "http://" + net.JoinHostPort(ip, "8080")
		for _, path := range []string{"/health", "/ready", "/"} {
			if code := get(t, replicas[i]+path); code != http.StatusOK {
				t.Errorf("GET %s on replica %d: %d", path, i, code)
			}
		}
	}
	sandboxAcrossReplicas(t, ctx, replicas, adminKey)
	throughService(t, c, adminKey)
}

// throughService checks the servers at the Service's cluster IP, as a
// client in the cluster (or behind an Ingress) reaches them: the web UI,
// /health and the E2B API.
func throughService(t *testing.T, c *kubetest.Cluster, key string) {
	t.Helper()
	ip := strings.TrimSpace(kubectl(t, c, "-n", ns, "get", "service", "cove", "-o", "jsonpath={.spec.clusterIP}"))
	if net.ParseIP(ip) == nil {
		t.Fatalf("the cove Service's cluster IP: %q", ip)
	}
	base := "http://" + ip // port 80
	for _, path := range []string{"/health", "/"} {
		if code := get(t, base+path); code != http.StatusOK {
			t.Errorf("GET %s through the Service: %d", path, code)
		}
	}
	// The UI's page, not just a 200.
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Errorf("GET / through the Service: %v", err)
	} else {
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(strings.ToLower(string(page)), "<html") {
			t.Errorf("GET / through the Service: not the web UI's page: %.200q", page)
		}
	}
	// The E2B API: a key's list of sandboxes (none left), and no key
	// turned away as E2B's API does.
	req, _ := http.NewRequest("GET", base+"/v2/sandboxes", nil)
	req.Header.Set("X-API-Key", key)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("E2B GET /v2/sandboxes through the Service: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var list []map[string]any
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &list) != nil {
		t.Errorf("E2B GET /v2/sandboxes through the Service: %d %s", resp.StatusCode, body)
	}
	if code := get(t, base+"/v2/sandboxes"); code != http.StatusUnauthorized {
		t.Errorf("E2B GET /v2/sandboxes through the Service without a key: %d, want 401", code)
	}
}

// sandboxAcrossReplicas makes a sandbox through one replica and works it
// through the other: exec, a file written on one and read on the other,
// a stop and resume that keeps it, a delete.
func sandboxAcrossReplicas(t *testing.T, ctx context.Context, replicas []string, key string) {
	a, err := remote.New(remote.Config{URL: replicas[0], APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	b, err := remote.New(remote.Config{URL: replicas[1], APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatalf("creating a sandbox through replica 0: %v", err)
	}
	sb, err := b.Get(ctx, s.ID())
	if err != nil {
		t.Fatalf("opening it through replica 1: %v", err)
	}
	if err := sb.WriteFile(ctx, "/workspace/note.txt", strings.NewReader("kept"), 0o644); err != nil {
		t.Fatalf("writing through replica 1: %v", err)
	}
	if err := b.Stop(ctx, s.ID()); err != nil {
		t.Fatalf("stopping through replica 1: %v", err)
	}
	s, err = a.Resume(ctx, s.ID())
	if err != nil {
		t.Fatalf("resuming through replica 0: %v", err)
	}
	rc, err := s.ReadFile(ctx, "/workspace/note.txt")
	if err != nil {
		t.Fatalf("reading after the resume: %v", err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "kept" {
		t.Errorf("the file after a stop and resume across replicas: %q", got)
	}
	if err := b.Delete(ctx, s.ID()); err != nil {
		t.Fatalf("deleting through replica 1: %v", err)
	}
}

// serverPods returns the addresses of the two server pods.
func serverPods(t *testing.T, c *kubetest.Cluster) []string {
	t.Helper()
	var ips []string
	for end := time.Now().Add(3 * time.Minute); time.Now().Before(end); time.Sleep(time.Second) {
		ips = strings.Fields(kubectl(t, c, "-n", ns, "get", "pods", "-l", "app.kubernetes.io/component=server",
			"-o", "jsonpath={.items[*].status.podIP}"))
		if len(ips) == 2 {
			return ips
		}
	}
	t.Fatalf("server pods' addresses: %q, want 2", ips)
	return nil
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func kubectl(t *testing.T, c *kubetest.Cluster, args ...string) string {
	t.Helper()
	out, err := kubectlErr(c, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func kubectlErr(c *kubetest.Cluster, args ...string) (string, error) {
	cmd := exec.Command(c.Bin("kubectl"), append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// buildCove builds a static cove into dir, as make build does (without
// the embedded local runtime, which a kube deployment does not use).
func buildCove(t *testing.T, dir string) string {
	t.Helper()
	prog := filepath.Join(dir, "cove")
	cmd := exec.Command("go", "build", "-trimpath", "-o", prog, "github.com/cove-sandbox/cove/cmd/cove")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building cove: %v\n%s", err, out)
	}
	return prog
}

func importServerImage(t *testing.T, c *kubetest.Cluster, prog, dir string) {
	t.Helper()
	var img bytes.Buffer
	if err := kubeimage.WriteServer(&img, dir, kubeimage.ServerOptions{Ref: "cove/server:latest", Program: prog}); err != nil {
		t.Fatal(err)
	}
	c.ImportImage(t, "cove/server:latest", &img)
}

// relay listens on the node's address, where the pods reach the host,
// and relays each connection to network/target on the host.
func relay(t *testing.T, nodeIP, network, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(nodeIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial(network, target)
				if err != nil {
					return
				}
				defer out.Close()
				go io.Copy(out, in)
				io.Copy(in, out)
			}()
		}
	}()
	return l.Addr().String()
}

// importSandboxImage imports the test template as the deployment's
// default template image, cove/base:latest (the kube runtime's default
// prefix and template).
func importSandboxImage(t *testing.T, c *kubetest.Cluster, dir string) {
	t.Helper()
	img, err := imagetest.Template(dir, "cove/base:latest")
	if err != nil {
		t.Fatal(err)
	}
	c.ImportImage(t, "cove/base:latest", bytes.NewReader(img))
}
