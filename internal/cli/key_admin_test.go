package cli

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
)

// TestKeyCreateAdminData: root who lost the admin key mints a new one
// from the data directory (the server stopped or running), a restart on
// existing data says how, and the new key is an admin key of that server.
func TestKeyCreateAdminData(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	home, data := serveHome(t, "ck")
	p := startServe(t, home, data)
	if p.admin == "" {
		t.Fatalf("no admin key printed on the first start:\n%s", p.stderr.String())
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
	p.admin = "" // lost

	// The server is down: the key goes straight into its store.
	out, errOut, err := run(t, "key", "create", "--admin", "--data", data)
	if err != nil {
		t.Fatalf("key create --admin --data: %v\n%s", err, errOut)
	}
	minted := strings.TrimSpace(out)
	if !strings.HasPrefix(minted, "cove_") || !strings.Contains(errOut, "shown once") {
		t.Fatalf("key create --data printed %q / %q", out, errOut)
	}

	// A start on existing data prints no key but the way back in.
	url, stdout := startServeOut(t, home, data)
	hint := "cove key create --admin --data " + data
	if !strings.Contains(stdout.String(), hint) || strings.Contains(stdout.String(), "COVE_API_KEY=") {
		t.Errorf("a start on existing data printed:\n%s\nwant the hint %q and no new key", stdout.String(), hint)
	}

	// The minted key is an admin key there: it lists every team's keys
	// and makes a team.
	var keys struct{ Keys []api.Key }
	if code := apiCall(t, "GET", url+"/v1/keys?all=true", minted, nil, &keys); code != 200 {
		t.Fatalf("GET /v1/keys with the minted key: %d", code)
	}
	admins, recovered := 0, false
	for _, k := range keys.Keys {
		if k.Admin && k.Team == "admin" {
			admins++
			recovered = recovered || k.Name == "admin-recovered"
		}
	}
	if admins != 2 || !recovered {
		t.Errorf("admin keys listed: %d, want the lost one and the minted one, named admin-recovered: %+v", admins, keys.Keys)
	}
	var k api.Key
	if code := apiCall(t, "POST", url+"/v1/keys", minted, api.CreateKey{Name: "ci", NewTeam: "acme"}, &k); code != 201 || k.Team != "acme" {
		t.Errorf("creating a team with the minted key: %d %+v", code, k)
	}

	// With the server running, a second one works at once.
	out, errOut, err = run(t, "key", "create", "again", "--admin", "--data", data)
	if err != nil {
		t.Fatalf("key create --data with the server running: %v\n%s", err, errOut)
	}
	if code := apiCall(t, "GET", url+"/v1/keys", strings.TrimSpace(out), nil, nil); code != 200 {
		t.Errorf("a key minted while the server runs: GET /v1/keys %d", code)
	}

	// Someone else on the machine may not.
	if code, msg := keyCreateAsNobody(t, home, data); code == 0 || !strings.Contains(msg, "run this as root") {
		t.Errorf("key create --data as nobody: exit %d %q, want a refusal saying to run it as root", code, msg)
	}
}

// TestKeyCreateDataRefusals: a wrong --data is refused with what to do,
// and no store is ever made where there was none.
func TestKeyCreateDataRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no such directory", []string{"--admin", "--data", filepath.Join(dir, "nope")}, "no such directory"},
		{"no store", []string{"--admin", "--data", dir}, "holds no Cove server data"},
		{"a file", []string{"--admin", "--data", filepath.Join(dir, "f")}, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.WriteFile(filepath.Join(dir, "f"), nil, 0o600)
			_, _, err := run(t, append([]string{"key", "create"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error saying %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "cove.db")); err == nil {
				t.Error("a refused key create made a store")
			}
		})
	}
	// A cove.db that is a link to another database: refused, the target
	// left as it was.
	linked := t.TempDir()
	other := filepath.Join(t.TempDir(), "other.db")
	os.WriteFile(other, []byte("not yours"), 0o600)
	os.Symlink(other, filepath.Join(linked, "cove.db"))
	if _, _, err := run(t, "key", "create", "--admin", "--data", linked); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a linked cove.db: %v, want it refused as a link", err)
	}
	if b, _ := os.ReadFile(other); string(b) != "not yours" {
		t.Errorf("the link's target was changed: %q", b)
	}
	for _, args := range [][]string{
		{"--data", dir}, // not --admin
		{"x", "--admin", "--data", dir, "--team", "acme"}, // a team key
		{"--admin", "--e2b", "--data", dir},
	} {
		_, errOut, err := run(t, append([]string{"key", "create"}, args...)...)
		if !errors.Is(err, clibase.ErrUsage) || !strings.Contains(errOut, "admin keys only") {
			t.Errorf("key create %v: %v %q, want a usage error", args, err, errOut)
		}
	}
}

// startServeOut starts cove serve over data, as startServe does, and
// returns its URL and its standard output so far and to come.
func startServeOut(t *testing.T, home, data string) (string, *sandboxtest.SyncBuffer) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "serve", "--addr", "127.0.0.1:0", "--data", data, "--state-dir", home, "--pool", "0")
	cmd.Env = append(os.Environ(), "COVE_TEST_CLI=1", "GORACE=atexit_sleep_ms=0")
	stdout, stderr := &sandboxtest.SyncBuffer{}, &sandboxtest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if i := strings.Index(stderr.String(), "url="); i >= 0 {
			return strings.Fields(stderr.String()[i+4:])[0], stdout
		}
	}
	t.Fatalf("cove serve did not start:\n%s", stderr.String())
	return "", nil
}

// keyCreateAsNobody runs `cove key create --admin --data data` as the
// user nobody, with home opened to everyone so that only data's own
// owner and mode stand in the way, and returns its exit code and stderr.
func keyCreateAsNobody(t *testing.T, home, data string) (int, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary's own directory is root's alone: a copy nobody
	// may run.
	bin := filepath.Join(home, "cove-test")
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(dst, src)
	dst.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(home, 0o700)
	cmd := exec.Command(bin, "key", "create", "--admin", "--data", data)
	cmd.Env = []string{"COVE_TEST_CLI=1", "GORACE=atexit_sleep_ms=0", "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running key create as nobody: %v", err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}
