package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/server/e2b"
	"github.com/cove-sandbox/cove/store/sqlite"
)

// The E2B control plane's snapshots, forks, network default, hosts for
// ports and unknown routes (the SDK drives them in TestE2BControlSDK).

// e2bCreate makes a sandbox through the E2B API with body as it is (no
// templateID is the default template) and returns it.
func (ts *testServer) e2bCreate(t testing.TB, key string, body map[string]any) e2bSandbox {
	t.Helper()
	var sb e2bSandbox
	resp, data := ts.e2bCall(t, "POST", "/v2/sandboxes", key, body, nil)
	if resp.StatusCode != 201 || json.Unmarshal(data, &sb) != nil {
		t.Fatalf("create %v: %d %s", body, resp.StatusCode, data)
	}
	// Deleted at the end if the server still answers (a test may have
	// restarted it; the runtime's own clean-up then takes the sandbox).
	t.Cleanup(func() {
		req, _ := http.NewRequest("DELETE", ts.URL+"/sandboxes/"+sb.SandboxID, nil)
		req.Header.Set("X-API-Key", key)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	return sb
}

// root is the workspace root of a sandbox (a snapshot keeps it, with the
// rest of the disk: e2b_snapdisk_test.go).
func (ts *testServer) root(t testing.TB, key, id string) string {
	t.Helper()
	var sb api.Sandbox
	ts.must(t, 200, "GET", "/v1/sandboxes/"+id, key, nil, &sb)
	return sb.Root
}

// wantE2BError checks an answer is E2B's error body with status want.
func wantE2BError(t *testing.T, what string, resp *http.Response, data []byte, want int) {
	t.Helper()
	if resp.StatusCode != want {
		t.Errorf("%s: %d %s, want %d", what, resp.StatusCode, data, want)
		return
	}
	e2bErrorBody(t, resp, data)
}

func TestE2BSnapshots(t *testing.T) {
	ts := newTestServer(t, Config{})
	key, other := ts.e2bKey(t, "snapa"), ts.e2bKey(t, "snapb")
	sb := ts.e2bCreate(t, key, map[string]any{"templateID": "base"})
	file := ts.root(t, key, sb.SandboxID) + "/kept.txt"
	ts.exec(t, key, sb.SandboxID, "echo kept in the snapshot > "+file)

	resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+sb.SandboxID+"/snapshots", key, map[string]any{"name": "mine"}, nil)
	wantE2BError(t, "a named snapshot", resp, data, 400)
	var sn e2b.SnapshotInfo
	resp, data = ts.e2bCall(t, "POST", "/sandboxes/"+sb.SandboxID+"/snapshots", key, map[string]any{}, nil)
	if resp.StatusCode != 201 || json.Unmarshal(data, &sn) != nil || sn.SnapshotID == "" || sn.Names == nil {
		t.Fatalf("snapshot: %d %s", resp.StatusCode, data)
	}
	t.Cleanup(func() { ts.e2bCall(t, "DELETE", "/templates/"+sn.SnapshotID, key, nil, nil) })

	list := func(k, query string) []e2b.SnapshotInfo {
		t.Helper()
		var out []e2b.SnapshotInfo
		resp, data := ts.e2bCall(t, "GET", "/snapshots"+query, k, nil, nil)
		if resp.StatusCode != 200 || json.Unmarshal(data, &out) != nil || out == nil {
			t.Fatalf("list snapshots%s: %d %s", query, resp.StatusCode, data)
		}
		return out
	}
	if got := list(key, ""); len(got) != 1 || got[0].SnapshotID != sn.SnapshotID {
		t.Errorf("the team's snapshots: %+v, want %s", got, sn.SnapshotID)
	}
	if got := list(key, "?sandboxID="+sb.SandboxID+"&name="+sn.SnapshotID); len(got) != 1 {
		t.Errorf("snapshots of the sandbox: %+v", got)
	}
	if got := list(key, "?sandboxID=another"); len(got) != 0 {
		t.Errorf("snapshots of another sandbox: %+v, want none", got)
	}

	// Pages of one, by X-Next-Token, give every snapshot once.
	for range 2 {
		var more e2b.SnapshotInfo
		resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+sb.SandboxID+"/snapshots", key, nil, nil)
		if resp.StatusCode != 201 || json.Unmarshal(data, &more) != nil {
			t.Fatalf("snapshot: %d %s", resp.StatusCode, data)
		}
		t.Cleanup(func() { ts.e2bCall(t, "DELETE", "/templates/"+more.SnapshotID, key, nil, nil) })
	}
	paged, token := map[string]bool{}, ""
	for page := 0; page < 4; page++ {
		var out []e2b.SnapshotInfo
		resp, data := ts.e2bCall(t, "GET", "/snapshots?limit=1&nextToken="+token, key, nil, nil)
		if resp.StatusCode != 200 || json.Unmarshal(data, &out) != nil || len(out) > 1 {
			t.Fatalf("page %d: %d %s", page, resp.StatusCode, data)
		}
		for _, sn := range out {
			paged[sn.SnapshotID] = true
		}
		if token = resp.Header.Get("X-Next-Token"); token == "" {
			break
		}
	}
	if len(paged) != 3 || token != "" {
		t.Errorf("pages of one: %v (next %q), want the 3 snapshots", paged, token)
	}
	resp, data = ts.e2bCall(t, "GET", "/snapshots?nextToken=nonsense", key, nil, nil)
	wantE2BError(t, "a bad nextToken", resp, data, 400)

	// Another team: cannot see, snapshot, use or delete any of it.
	if got := list(other, ""); len(got) != 0 {
		t.Errorf("another team lists %+v", got)
	}
	resp, data = ts.e2bCall(t, "POST", "/sandboxes/"+sb.SandboxID+"/snapshots", other, map[string]any{}, nil)
	wantE2BError(t, "another team snapshots the sandbox", resp, data, 404)
	resp, data = ts.e2bCall(t, "POST", "/v2/sandboxes", other, map[string]any{"templateID": sn.SnapshotID}, nil)
	wantE2BError(t, "another team creates from the snapshot", resp, data, 404)
	resp, data = ts.e2bCall(t, "DELETE", "/templates/"+sn.SnapshotID, other, nil, nil)
	wantE2BError(t, "another team deletes the snapshot", resp, data, 404)

	// A sandbox made from the snapshot has the file, and outlives the
	// one it was taken of.
	ts.e2bCall(t, "DELETE", "/sandboxes/"+sb.SandboxID, key, nil, nil)
	from := ts.e2bCreate(t, key, map[string]any{"templateID": sn.SnapshotID})
	if got := ts.exec(t, key, from.SandboxID, "cat "+file); got != "kept in the snapshot\n" {
		t.Errorf("the file in a sandbox made from the snapshot: %q", got)
	}
	if from.TemplateID != sn.SnapshotID {
		t.Errorf("the new sandbox's templateID: %q, want the snapshot's id %s", from.TemplateID, sn.SnapshotID)
	}
	if from.EnvdAccessToken == "" || from.EnvdAccessToken == sb.EnvdAccessToken {
		t.Errorf("the new sandbox's envd token %q: want one of its own", from.EnvdAccessToken)
	}

	resp, data = ts.e2bCall(t, "DELETE", "/templates/"+sn.SnapshotID, key, nil, nil)
	if resp.StatusCode != 204 {
		t.Fatalf("delete: %d %s", resp.StatusCode, data)
	}
	resp, data = ts.e2bCall(t, "DELETE", "/templates/"+sn.SnapshotID, key, nil, nil)
	wantE2BError(t, "delete again", resp, data, 404)
	resp, data = ts.e2bCall(t, "POST", "/v2/sandboxes", key, map[string]any{"templateID": sn.SnapshotID}, nil)
	wantE2BError(t, "create from a deleted snapshot", resp, data, 404)
	resp, data = ts.e2bCall(t, "DELETE", "/templates/base", key, nil, nil)
	wantE2BError(t, "delete a template", resp, data, 404)
}

func TestE2BFork(t *testing.T) {
	ts := newTestServer(t, Config{})
	key, other := ts.e2bKey(t, "forka"), ts.e2bKey(t, "forkb")
	parent := ts.e2bCreate(t, key, map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}})
	file := ts.root(t, key, parent.SandboxID) + "/forked.txt"
	ts.exec(t, key, parent.SandboxID, "echo from the parent > "+file)

	for _, body := range []map[string]any{{"count": 0}, {"count": 11}, {"timeout": 0}, {"count": "two"}} {
		resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+parent.SandboxID+"/fork", key, body, nil)
		wantE2BError(t, fmt.Sprintf("fork %v", body), resp, data, 400)
	}
	resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+parent.SandboxID+"/fork", other, map[string]any{"count": 1}, nil)
	wantE2BError(t, "another team forks", resp, data, 404)

	resp, data = ts.e2bCall(t, "POST", "/sandboxes/"+parent.SandboxID+"/fork", key, map[string]any{"count": 2, "timeout": 120}, nil)
	if resp.StatusCode == http.StatusNotImplemented {
		t.Skipf("this runtime cannot fork: %s", data)
	}
	var results []struct {
		Sandbox *e2bSandbox
		Error   *struct{ Code int }
	}
	if resp.StatusCode != 201 || json.Unmarshal(data, &results) != nil || len(results) != 2 {
		t.Fatalf("fork count 2: %d %s", resp.StatusCode, data)
	}
	seen := map[string]bool{parent.SandboxID: true}
	tokens := map[string]bool{parent.EnvdAccessToken: true}
	for i, res := range results {
		if res.Sandbox == nil {
			t.Fatalf("fork %d failed: %s", i, data)
		}
		child := *res.Sandbox
		t.Cleanup(func() { ts.e2bCall(t, "DELETE", "/sandboxes/"+child.SandboxID, key, nil, nil) })
		if seen[child.SandboxID] || tokens[child.EnvdAccessToken] || child.EnvdAccessToken == "" || child.TrafficAccessToken == nil || *child.TrafficAccessToken == *parent.TrafficAccessToken {
			t.Errorf("fork %d: %+v: want an id and tokens of its own", i, child)
		}
		seen[child.SandboxID], tokens[child.EnvdAccessToken] = true, true
		if got := ts.exec(t, key, child.SandboxID, "cat "+file); got != "from the parent\n" {
			t.Errorf("fork %d: the parent's file: %q", i, got)
		}
		// The parent's envd token does not open the child's envd.
		resp, data := ts.e2bCall(t, "GET", "/files?path="+file, "", nil, map[string]string{
			"E2b-Sandbox-Id": child.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": parent.EnvdAccessToken})
		if resp.StatusCode != 401 {
			t.Errorf("fork %d: the parent's envd token: %d %s", i, resp.StatusCode, data)
		}
		var d e2bDetail
		resp, data = ts.e2bCall(t, "GET", "/sandboxes/"+child.SandboxID, key, nil, nil)
		if resp.StatusCode != 200 || json.Unmarshal(data, &d) != nil || d.State != "running" ||
			d.EndAt.Before(time.Now().Add(60*time.Second)) || d.EndAt.After(time.Now().Add(121*time.Second)) {
			t.Errorf("fork %d: %d %s: want running, ending in 120 s", i, resp.StatusCode, data)
		}
		// Another team does not see it.
		resp, data = ts.e2bCall(t, "GET", "/sandboxes/"+child.SandboxID, other, nil, nil)
		wantE2BError(t, "another team gets the fork", resp, data, 404)
	}
	// The parent runs on.
	if got := ts.exec(t, key, parent.SandboxID, "cat "+file); got != "from the parent\n" {
		t.Errorf("the parent after the fork: %q", got)
	}
}

// TestE2BNetworkDefault: a create that does not set allowInternetAccess
// gets the server's E2B network setting (internet unless told none);
// Cove's own API keeps none; allowInternetAccess overrides either way.
func TestE2BNetworkDefault(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := New(Config{Runtime: testRuntime(t, dir), Store: st, E2BNetwork: "some"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a server with E2B network \"some\": %v, want ErrInvalid", err)
	}
	for _, setting := range []string{"", "internet", "none"} {
		t.Run("setting="+setting, func(t *testing.T) {
			ts := newTestServer(t, Config{E2BNetwork: setting})
			key := ts.e2bKey(t, "net")
			def := cmp.Or(setting, "internet")
			for _, c := range []struct {
				body map[string]any
				want string
			}{
				{map[string]any{}, def},
				{map[string]any{"allow_internet_access": true}, "internet"},
				{map[string]any{"allow_internet_access": false}, "none"},
			} {
				sb := ts.e2bCreate(t, key, c.body)
				var d e2bDetail
				resp, data := ts.e2bCall(t, "GET", "/sandboxes/"+sb.SandboxID, key, nil, nil)
				if resp.StatusCode != 200 || json.Unmarshal(data, &d) != nil || d.AllowInternetAccess != (c.want == "internet") {
					t.Errorf("create %v: %s, want allowInternetAccess %v", c.body, data, c.want == "internet")
				}
				var v api.Sandbox
				ts.must(t, 200, "GET", "/v1/sandboxes/"+sb.SandboxID, key, nil, &v)
				if got := networkMode(v); got != c.want {
					t.Errorf("create %v: network %q, want %q", c.body, got, c.want)
				}
			}
			v1 := ts.create(t, key, api.CreateSandbox{})
			if got := networkMode(v1); got != "none" {
				t.Errorf("a /v1 create's network: %q, want none", got)
			}
		})
	}
}

func networkMode(v api.Sandbox) string {
	if v.Network == nil || v.Network.Mode == "" {
		return "none"
	}
	return v.Network.Mode
}

// TestE2BNetworkEgress: with each setting, a sandbox made through the E2B
// API with no network options reaches the (fake) internet or does not.
func TestE2BNetworkEgress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the fake internet is a network namespace: run as root")
	}
	fakeOutside(t)
	for _, setting := range []string{"internet", "none"} {
		t.Run(setting, func(t *testing.T) {
			ts := newTestServer(t, Config{E2BNetwork: setting})
			key := ts.e2bKey(t, "egress")
			sb := ts.e2bCreate(t, key, map[string]any{})
			out := ts.exec(t, key, sb.SandboxID, `timeout 5 bash -c 'exec 3<>/dev/tcp/198.18.9.10/8080 && printf "GET / HTTP/1.0\r\n\r\n" >&3 && cat <&3' 2>&1; echo exit=$?`)
			reached := strings.Contains(out, "hello from the outside")
			if reached != (setting == "internet") {
				t.Errorf("setting %s: a default sandbox's request to the internet: %q", setting, out)
			}
		})
	}
}

// fakeOutside is a network namespace standing in for the internet: an
// HTTP server on 198.18.9.10:8080 (a benchmarking address, which
// sandboxes treat as public) behind a gateway at 10.97.9.10, joined to
// the host (10.97.9.1) by a veth pair; removed at the end.
//
// go test runs packages at the same time, so these ranges are used by no
// other package's tests: sandbox/local's take 10.97.1-3.0/24, 10.99.0.0/24,
// 198.18.1-3.0/24, 198.51.100-102.0/24 and 203.0.113.0/24 (one of them
// puts 198.51.100.0/24 on the host as its LAN, which sandboxes must not
// reach, and a route here to the same /24 would both fail to add and be
// walled off).
func fakeOutside(t *testing.T) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	hostNS, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer hostNS.Close()
	b := make([]byte, 3)
	rand.Read(b)
	hostIf := "te" + hex.EncodeToString(b)
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostIf}, PeerName: hostIf + "p"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(hostIf); err == nil {
			netlink.LinkDel(l)
		}
	})
	ns, err := netns.New() // this thread is now in it
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	defer netns.Set(hostNS)
	netns.Set(hostNS)
	peer, err := netlink.LinkByName(hostIf + "p")
	if err == nil {
		err = netlink.LinkSetNsFd(peer, int(ns))
	}
	hl, _ := netlink.LinkByName(hostIf)
	addr, _ := netlink.ParseAddr("10.97.9.1/24")
	if err == nil {
		err = netlink.AddrAdd(hl, addr)
	}
	if err == nil {
		err = netlink.LinkSetUp(hl)
	}
	_, dst, _ := net.ParseCIDR("198.18.9.0/24")
	if err == nil {
		err = netlink.RouteAdd(&netlink.Route{LinkIndex: hl.Attrs().Index, Dst: dst, Gw: net.ParseIP("10.97.9.10")})
	}
	if err != nil {
		t.Fatalf("the fake outside, host side: %v", err)
	}
	netns.Set(ns)
	pl, err := netlink.LinkByName(hostIf + "p")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"10.97.9.10/24", "198.18.9.10/24"} {
		addr, _ := netlink.ParseAddr(a)
		if err := netlink.AddrAdd(pl, addr); err != nil {
			t.Fatal(err)
		}
	}
	netlink.LinkSetUp(pl)
	netlink.RouteAdd(&netlink.Route{LinkIndex: pl.Attrs().Index, Gw: net.ParseIP("10.97.9.1")})
	// The socket keeps the namespace it was made in.
	l, err := net.Listen("tcp", "198.18.9.10:8080")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from the outside\n") }))
}

// TestE2BHosts: create, connect and get answer a domain, never null:
// the server's --domain, or localhost and the port the request came to,
// whose {port}-{id} names reach the sandbox's ports.
func TestE2BHosts(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.e2bKey(t, "hosts")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(ts.URL, "http://"))
	want := "localhost:" + port
	sb := ts.e2bCreate(t, key, map[string]any{"templateID": "base"})
	if sb.Domain == nil || *sb.Domain != want {
		t.Errorf("create's domain: %v, want %s", sb.Domain, want)
	}
	var d e2bDetail
	if resp, data := ts.e2bCall(t, "GET", "/sandboxes/"+sb.SandboxID, key, nil, nil); resp.StatusCode != 200 || json.Unmarshal(data, &d) != nil || d.Domain == nil || *d.Domain != want {
		t.Errorf("get's domain: %s, want %s", data, want)
	}
	var c e2bSandbox
	if resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+sb.SandboxID+"/connect", key, map[string]any{"timeout": 300}, nil); resp.StatusCode != 200 || json.Unmarshal(data, &c) != nil || c.Domain == nil || *c.Domain != want {
		t.Errorf("connect's domain: %s, want %s", data, want)
	}

	// The host getHost(8000) makes reaches the port.
	ts.exec(t, key, sb.SandboxID, "mkdir -p /tmp/www && echo served by the sandbox > /tmp/www/index.html && (cd /tmp/www && nohup python3 -m http.server 8000 >/dev/null 2>&1 &)")
	host := "8000-" + sb.SandboxID + "." + want
	var got string
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest("GET", ts.URL+"/", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got = fmt.Sprintf("%d %s", resp.StatusCode, data); resp.StatusCode == 200 {
			break
		}
	}
	if got != "200 served by the sandbox\n" {
		t.Errorf("GET http://%s/: %s", host, got)
	}

	// A configured domain is answered as it is.
	es := newE2BServer(t, Config{})
	ekey := es.e2bKey(t, "hosts")
	if sb := es.e2bCreate(t, ekey, map[string]any{}); sb.Domain == nil || *sb.Domain != es.domain {
		t.Errorf("create's domain with --domain %s: %v", es.domain, sb.Domain)
	}
}

// TestE2BUnknownRoutes: what no route serves under E2B's paths (or with
// an e2b_ key) is E2B's JSON 404; /v1, the UI and /health keep theirs.
func TestE2BUnknownRoutes(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.e2bKey(t, "unknown")
	for _, c := range []struct{ method, path, key string }{
		{"GET", "/sandboxes/sbx1/nothing", key},
		{"GET", "/v2/nothing", key},
		{"GET", "/v3/templates", ""},
		{"GET", "/templates", key},
		{"POST", "/templates/base/builds", key},
		{"GET", "/teams", key},
		{"GET", "/volumes", ""},
		{"GET", "/snapshots/snap-x", key},
		{"GET", "/nothing/here", key},
	} {
		resp, data := ts.e2bCall(t, c.method, c.path, c.key, nil, nil)
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s %s: Content-Type %q", c.method, c.path, ct)
		}
		wantE2BError(t, c.method+" "+c.path, resp, data, 404)
	}
	// A known path with a method it does not take is a 405 saying which.
	resp, data := ts.e2bCall(t, "PUT", "/sandboxes/sbx1", key, nil, nil)
	wantE2BError(t, "PUT /sandboxes/sbx1", resp, data, 405)
	if allow := resp.Header.Get("Allow"); allow != "GET, DELETE" {
		t.Errorf("PUT /sandboxes/sbx1: Allow %q, want GET, DELETE", allow)
	}
	// The rest keep their answers.
	if resp, data := ts.e2bCall(t, "GET", "/health", key, nil, nil); resp.StatusCode != 200 || !strings.Contains(string(data), `"ok"`) {
		t.Errorf("/health: %d %s", resp.StatusCode, data)
	}
	for _, path := range []string{"/v1/nothing", "/nothing/here"} {
		resp, data := ts.do(t, "GET", path, nil, nil)
		var e struct{ Code int }
		if resp.StatusCode != 404 || json.Unmarshal(data, &e) == nil && e.Code == 404 {
			t.Errorf("GET %s without an e2b_ key: %d %s, want the server's own 404", path, resp.StatusCode, data)
		}
	}
	if resp, data := ts.e2bCall(t, "GET", "/v1/nothing", key, nil, nil); resp.StatusCode != 404 || strings.Contains(string(data), `"code":404`) {
		t.Errorf("GET /v1/nothing with an e2b_ key: %d %s, want /v1's own 404", resp.StatusCode, data)
	}
	// Known routes are unchanged.
	if resp, data := ts.e2bCall(t, "GET", "/v2/sandboxes", key, nil, nil); resp.StatusCode != 200 {
		t.Errorf("GET /v2/sandboxes: %d %s", resp.StatusCode, data)
	}
}

// TestE2BControlSDK runs testdata/e2b/control.test.mjs with the pinned
// E2B JS SDK: snapshots, forks and getHost, with envd reached by host
// name (--domain, TLS), by E2B_SANDBOX_URL's headers, and as the README's
// local set-up has it (no --domain, plain HTTP, E2B_SANDBOX_URL, ports at
// {port}-{id}.localhost:PORT; e2b.mjs resolves *.localhost to loopback as
// browsers, curl and glibc's nss-myhostname do).
func TestE2BControlSDK(t *testing.T) {
	sdk, why := e2bSDKDir(t)
	if sdk == "" {
		t.Skip(why)
	}
	es := newE2BServer(t, Config{})
	key := es.e2bKey(t, "control")
	local := &e2bServer{testServer: newTestServer(t, Config{})}
	localKey := local.e2bKey(t, "control")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(local.URL, "http://"))
	for _, mode := range []string{"domain", "header", "local"} {
		t.Run(mode, func(t *testing.T) {
			srv, env := es, append(es.modeEnv(key, mode), "COVE_E2B_PORT_SCHEME=https")
			if mode == "local" {
				srv, env = local, []string{"E2B_API_KEY=" + localKey, "COVE_E2B_MODE=" + mode, "COVE_E2B_DOMAIN=localhost",
					"E2B_SANDBOX_URL=" + local.URL, "COVE_E2B_PORT_SCHEME=http", "COVE_E2B_LOCAL_DOMAIN=localhost:" + port}
			}
			scripts := []string{"control.test.mjs"}
			if agents := controlAgentsSDK(); agents != "" {
				env = append(env, "COVE_AGENTS_SDK="+agents)
				scripts = append(scripts, "agents_snapshot.test.mjs")
			} else {
				t.Log("the Agents SDK is not installed in .cache/npm/agents (scripts/deps.sh): its snapshot persistence is not run")
			}
			for _, script := range scripts {
				out, err := srv.node(t, sdk, env, "--test-reporter=spec", script)
				if err != nil {
					t.Fatalf("node %s (%s): %v\n%s", script, mode, err, out)
				}
				t.Logf("%s", out)
			}
		})
	}
}

// controlAgentsSDK is the directory whose node_modules holds the pinned
// @openai/agents-extensions (scripts/deps.sh), "" when it is not there.
func controlAgentsSDK() string {
	dir, _ := filepath.Abs(filepath.Join("..", ".cache", "npm", "agents"))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@openai", "agents-extensions", "package.json")); err != nil {
		return ""
	}
	return dir
}
