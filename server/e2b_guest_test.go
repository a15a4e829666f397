package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
)

// TestE2BGuestSDK runs testdata/e2b/guest.test.mjs, the unmodified E2B
// JS SDK against the sandbox's daemon through the server (issue 15): a
// command's timeoutMs leaves no process behind (foreground, background,
// after the client disconnects), and files.write gives watchDir envd's
// events on the written path. Both routing modes.
func TestE2BGuestSDK(t *testing.T) {
	sdk, why := e2bSDKDir(t)
	if sdk == "" {
		t.Skip(why)
	}
	es := newE2BServer(t, Config{})
	key := es.e2bKey(t, "guest")
	es.runSuite(t, sdk, key, "guest.test.mjs")
}

// envdClient reaches one sandbox's envd through the server as E2B's
// Python SDK does: Connect's protocol by hand, the deadline in
// Connect-Timeout-Ms, over HTTP/1.1 (E2B_SANDBOX_URL's headers) or
// HTTP/2 (the sandbox's host name, TLS).
type envdClient struct {
	base  string
	hdr   http.Header
	http  *http.Client
	proto string // the protocol the responses must come in
}

func (es *e2bServer) envdClients(t *testing.T, id, token string) []envdClient {
	t.Helper()
	pem, err := os.ReadFile(es.caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	_, port, _ := net.SplitHostPort(es.domain)
	h2 := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, "127.0.0.1:"+port)
		},
	}
	t.Cleanup(h2.CloseIdleConnections)
	h1 := &http.Transport{}
	t.Cleanup(h1.CloseIdleConnections)
	tok := http.Header{"X-Access-Token": {token}}
	byHeader := tok.Clone()
	byHeader.Set("E2b-Sandbox-Id", id)
	byHeader.Set("E2b-Sandbox-Port", "49983")
	return []envdClient{
		{base: es.URL, hdr: byHeader, http: &http.Client{Transport: h1}, proto: "HTTP/1.1"},
		{base: "https://49983-" + id + "." + es.domain, hdr: tok, http: &http.Client{Transport: h2}, proto: "HTTP/2.0"},
	}
}

// procStream is a Process.Start stream read by hand.
type procStream struct {
	resp   *http.Response
	rd     *bufio.Reader
	cancel context.CancelFunc
}

// start calls Process.Start for sh -c script with Connect-Timeout-Ms
// timeoutMs (none when 0) and reads the start event.
func (c envdClient) start(t *testing.T, script string, timeoutMs int) (*procStream, int) {
	t.Helper()
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", script}}})
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	body = append(body, msg...)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", c.base+"/process.Process/Start", bytes.NewReader(body))
	req.Header = c.hdr.Clone()
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	if timeoutMs > 0 {
		req.Header.Set("Connect-Timeout-Ms", fmt.Sprint(timeoutMs))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("Process.Start (%s): %v", c.proto, err)
	}
	s := &procStream{resp: resp, rd: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(s.close)
	if resp.StatusCode != 200 || resp.Proto != c.proto {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("Process.Start: %s %d %s, want %s 200", resp.Proto, resp.StatusCode, data, c.proto)
	}
	var ev struct {
		Event struct {
			Start *struct {
				Pid int `json:"pid"`
			} `json:"start"`
		} `json:"event"`
	}
	flags, data := s.next(t)
	if flags != 0 || json.Unmarshal(data, &ev) != nil || ev.Event.Start == nil || ev.Event.Start.Pid <= 0 {
		t.Fatalf("first message (flags %d): %s, want a start event with a pid", flags, data)
	}
	return s, ev.Event.Start.Pid
}

// next reads one enveloped message.
func (s *procStream) next(t *testing.T) (byte, []byte) {
	t.Helper()
	var head [5]byte
	if _, err := io.ReadFull(s.rd, head[:]); err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	data := make([]byte, binary.BigEndian.Uint32(head[1:]))
	if _, err := io.ReadFull(s.rd, data); err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	return head[0], data
}

// endCode reads to the end of the stream and returns its error code
// ("" for none).
func (s *procStream) endCode(t *testing.T) string {
	t.Helper()
	for {
		flags, data := s.next(t)
		if flags&2 == 0 {
			continue
		}
		var end struct {
			Error *struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &end); err != nil {
			t.Fatalf("end of stream %s: %v", data, err)
		}
		if end.Error == nil {
			return ""
		}
		return end.Error.Code
	}
}

// close leaves the stream: the client disconnects.
func (s *procStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// procsHolding lists the command lines in sandbox id that hold m.
func (ts *testServer) procsHolding(t *testing.T, key, id, m string) []string {
	t.Helper()
	scan := `for p in /proc/[0-9]*; do [ "$p" = /proc/$$ ] && continue; c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null); case "$c" in *` + m + `*) echo "$c";; esac; done`
	var got []string
	for _, l := range strings.Split(ts.exec(t, key, id, scan), "\n") {
		if strings.TrimSpace(l) != "" && !strings.Contains(l, "/proc/[0-9]") {
			got = append(got, l)
		}
	}
	return got
}

// noneLeft polls until no process in sandbox id holds m.
func (ts *testServer) noneLeft(t *testing.T, key, id, m, what string) {
	t.Helper()
	var left []string
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if left = ts.procsHolding(t, key, id, m); len(left) == 0 {
			return
		}
	}
	t.Fatalf("%s: processes left 30 s after the deadline: %q", what, left)
}

// markers gives sleep durations no other command line holds.
type markers int

func (m *markers) next() string {
	*m++
	return fmt.Sprint(800000 + int(*m)*10 + int(time.Now().UnixNano()%7))
}

// TestE2BCommandDeadline: envd's deadline as E2B's Python SDK sends it
// (Connect-Timeout-Ms on a Process.Start stream), through the server's
// envd proxy over HTTP/1.1 and HTTP/2: the stream ends with
// deadline_exceeded and the command's process group is gone; a client
// that disconnects before the deadline does not save the command from
// it; and a command started without one outlives its client.
func TestE2BCommandDeadline(t *testing.T) {
	es := newE2BServer(t, Config{})
	key := es.e2bKey(t, "deadline")
	sb := es.e2bCreate(t, key, map[string]any{"templateID": "base"})
	if sb.EnvdAccessToken == "" {
		t.Fatalf("create: no envdAccessToken in %+v", sb)
	}
	var m markers
	for _, c := range es.envdClients(t, sb.SandboxID, sb.EnvdAccessToken) {
		t.Run(c.proto, func(t *testing.T) {
			kept := m.next()
			s, keptPID := c.start(t, "sleep "+kept, 0)
			s.close()

			mk := m.next()
			s, _ = c.start(t, fmt.Sprintf("sleep %s & sleep %s; wait", mk, mk+"1"), 1500)
			if code := s.endCode(t); code != "deadline_exceeded" {
				t.Errorf("the stream ended with %q, want deadline_exceeded", code)
			}
			es.noneLeft(t, key, sb.SandboxID, mk, "attached to the end")

			gone := m.next()
			s, _ = c.start(t, fmt.Sprintf("sleep %s & sleep %s; wait", gone, gone+"1"), 1500)
			s.close()
			es.noneLeft(t, key, sb.SandboxID, gone, "disconnected before the deadline")

			// Both deadlines have passed; the command without one runs on.
			if left := es.procsHolding(t, key, sb.SandboxID, kept); len(left) == 0 {
				t.Errorf("a command started without a deadline, its client gone: processes %q, want it running", left)
			}
			es.must(t, 204, "POST", fmt.Sprintf("/v1/sandboxes/%s/processes/%d/signal", sb.SandboxID, keptPID), key, api.Signal{Signal: "KILL"}, nil)
			es.noneLeft(t, key, sb.SandboxID, kept, "killed")
		})
	}
}

// TestExecTimeoutKillsGroup: Cove's own exec with timeout_seconds ends
// the command's whole process group, in the foreground and in the
// background.
func TestExecTimeoutKillsGroup(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "timeoutgroup")
	sb := ts.create(t, key, api.CreateSandbox{})
	var m markers
	for _, bg := range []bool{false, true} {
		mk := m.next()
		r := ts.run(t, key, sb.ID, api.Exec{Cmd: fmt.Sprintf("sleep %s & sleep %s; wait", mk, mk+"1"), Shell: true, Background: bg, TimeoutSeconds: 1})
		if r.pid <= 0 || (!bg && (r.exit.Type != "exit" || !r.exit.TimedOut)) {
			t.Errorf("background %v: events %v, last %+v; want a start and, in the foreground, an exit with timed_out", bg, r.types, r.exit)
		}
		ts.noneLeft(t, key, sb.ID, mk, fmt.Sprintf("background %v", bg))
	}
}
