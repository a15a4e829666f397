package runtimes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/internal/cli/sandboxbin"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/hostproc"
	"github.com/cove-sandbox/cove/sandbox/local"
	"github.com/cove-sandbox/cove/sandbox/remote"
	"github.com/cove-sandbox/cove/template"
)

// Kind says what a runtime chosen for a command is.
type Kind int

const (
	// Isolated is the local runtime: namespaces, an overlay root, seccomp.
	Isolated Kind = iota
	// Unisolated is hostproc: the daemon as a plain host process.
	Unisolated
	// Remote is a Cove server's sandboxes (sandbox/remote).
	Remote
)

// Local is the local runtime of stateDir (DataDir's rules): sandboxes in
// DIR/sandboxes, templates in DIR/templates, COVE_POOL sandboxes kept
// started ahead, and the private ranges of COVE_NETWORK_ALLOW_PRIVATE
// that a sandbox's allow list may name.
func Local(stateDir string) (*local.Runtime, error) {
	dir := DataDir(stateDir)
	var err error
	pool := 0
	if v := os.Getenv("COVE_POOL"); v != "" {
		if pool, err = strconv.Atoi(v); err != nil || pool < 0 {
			return nil, fmt.Errorf("COVE_POOL=%q: want a number of sandboxes to keep ready", v)
		}
	}
	allowPrivate, err := local.ParseNetworks(os.Getenv("COVE_NETWORK_ALLOW_PRIVATE"))
	if err != nil {
		return nil, fmt.Errorf("COVE_NETWORK_ALLOW_PRIVATE: %w", err)
	}
	shimCmd, initCmd, err := sandboxbin.LocalCommands(filepath.Join(dir, "bin"))
	if err != nil {
		return nil, err
	}
	return local.New(local.Config{Dir: filepath.Join(dir, "sandboxes"), Templates: &lazyTemplates{dir: dir}, Pool: pool,
		Command: shimCmd, InitCommand: initCmd, NetworkAllowPrivate: allowPrivate})
}

// lazyTemplates is the template store of dir (Templates), opened when a
// sandbox is first made from it: a one-shot `cove sandbox exec` or `ls`
// never needs it.
type lazyTemplates struct {
	dir   string
	once  sync.Once
	store local.Templates
	err   error
}

// Resolve implements local.Templates.
func (t *lazyTemplates) Resolve(ctx context.Context, name string) (local.Rootfs, error) {
	t.once.Do(func() {
		store, err := Templates(t.dir)
		t.store, t.err = local.StoreTemplates{Store: store}, err
	})
	if t.err != nil {
		return local.Rootfs{}, t.err
	}
	return t.store.Resolve(ctx, name)
}

// Templates is the template store of stateDir (DataDir's rules), in
// DIR/templates: the one the local runtime, cove serve's and cove
// template share.
func Templates(stateDir string) (*template.Store, error) {
	return template.Open(filepath.Join(DataDir(stateDir), "templates"))
}

// Hostproc is the unisolated runtime of stateDir, the fallback when the
// local runtime cannot run here (not root): sandboxes in DIR/hostproc.
func Hostproc(stateDir string) (*hostproc.Runtime, error) {
	dir := DataDir(stateDir)
	cmd, err := guestCommand(dir)
	if err != nil {
		return nil, err
	}
	return hostproc.New(hostproc.Config{Dir: filepath.Join(dir, "hostproc"), GuestCommand: cmd})
}

// guestCommand is hostproc's daemon command line: the embedded sandbox
// program installed under dir/bin, or nil (cove runs the role itself)
// when cove was built without it.
func guestCommand(dir string) ([]string, error) {
	cmd, err := sandboxbin.Command(filepath.Join(dir, "bin"))
	if cmd != nil {
		cmd = append(cmd, "guest")
	}
	return cmd, err
}

// RemoteRuntime is the sandboxes of the Cove server at url, as the team
// of the key in COVE_API_KEY.
func RemoteRuntime(url string) (*remote.Runtime, error) {
	key := os.Getenv("COVE_API_KEY")
	if key == "" {
		return nil, fmt.Errorf("COVE_API_KEY is not set: the server %s needs an API key (cove serve prints the first one; cove key create makes more)", url)
	}
	return remote.New(remote.Config{URL: url, APIKey: key})
}

// SandboxRuntime is what `cove sandbox` works on: a Cove server when
// server (--server) or COVE_SERVER names one, else the local runtime.
func SandboxRuntime(stateDir, server string) (sandbox.Runtime, error) {
	if u := ServerURL(server); u != "" {
		return RemoteRuntime(u)
	}
	return Local(stateDir)
}

// Machine is a runtime on this machine: the local runtime when it works
// here (root), else hostproc; fallback says why the local runtime could
// not be used (nil when it is).
func Machine(stateDir string) (rt sandbox.Runtime, fallback error, err error) {
	lrt, lerr := Local(stateDir)
	if lerr == nil {
		return lrt, nil, nil
	}
	hrt, err := Hostproc(stateDir)
	if err != nil {
		return nil, lerr, err
	}
	return hrt, lerr, nil
}

// AgentRuntime is where `cove run` makes its sandbox: on the Cove server
// that server (--server) or COVE_SERVER names, else on this machine
// (Machine).
func AgentRuntime(stateDir, server string) (sandbox.Runtime, Kind, error) {
	if u := ServerURL(server); u != "" {
		rt, err := RemoteRuntime(u)
		return rt, Remote, err
	}
	rt, fallback, err := Machine(stateDir)
	if fallback != nil {
		return rt, Unisolated, err
	}
	return rt, Isolated, err
}

// Server is the local runtime of a Cove server: its sandboxes in
// the server's data directory, templates shared with `cove template`
// under stateDir, pool sandboxes of the default size's disk (which most
// creates ask for) kept started ahead; allowPrivate is
// --network-allow-private.
func Server(stateDir, data string, pool int, allowPrivate string) (*local.Runtime, error) {
	nets, err := local.ParseNetworks(allowPrivate)
	if err != nil {
		return nil, fmt.Errorf("--network-allow-private: %w", err)
	}
	dir := DataDir(stateDir)
	store, err := Templates(dir)
	if err != nil {
		return nil, err
	}
	shimCmd, initCmd, err := sandboxbin.LocalCommands(filepath.Join(dir, "bin"))
	if err != nil {
		return nil, err
	}
	return local.New(local.Config{Dir: filepath.Join(data, "sandboxes"), Templates: local.StoreTemplates{Store: store},
		Command: shimCmd, InitCommand: initCmd, Pool: pool, PoolDiskBytes: api.Sizes["small"].DiskBytes, NetworkAllowPrivate: nets})
}

// BenchHostproc is a hostproc runtime in dir, for `cove bench` to time
// the daemon with nothing around it.
func BenchHostproc(dir string) (sandbox.Runtime, error) {
	cmd, err := guestCommand(DataDir(""))
	if err != nil {
		return nil, err
	}
	return hostproc.New(hostproc.Config{Dir: dir, GuestCommand: cmd})
}

// BenchLocal is a local runtime in dir (host template, no limits), with
// pool sandboxes kept started ahead, for `cove bench` to compare with
// its peers.
func BenchLocal(dir string, pool int) (*local.Runtime, error) {
	shimCmd, initCmd, err := sandboxbin.LocalCommands(filepath.Join(DataDir(""), "bin"))
	if err != nil {
		return nil, err
	}
	return local.New(local.Config{Dir: dir, Pool: pool, Command: shimCmd, InitCommand: initCmd})
}

// BenchHostRoot is the host template's root directory and the host
// directories it binds, as the runtime of BenchLocal(dir) runs its
// sandboxes from (a local runtime without Templates keeps its store in
// dir/.templates): `cove bench` hands the same root to a bare runsc run.
func BenchHostRoot(dir string) (root string, binds []string, err error) {
	store, err := template.Open(filepath.Join(dir, ".templates"))
	if err != nil {
		return "", nil, err
	}
	tm, err := store.Host()
	if err != nil {
		return "", nil, err
	}
	return tm.RootFS, tm.Binds, nil
}

// TemplatesInUse returns the function that tells whether a local sandbox
// under stateDir, running or stopped, uses the template with a given
// digest (so `cove template rm` keeps it).
func TemplatesInUse(ctx context.Context, stateDir string) (func(digest string) bool, error) {
	sandboxes := filepath.Join(stateDir, "sandboxes")
	if _, err := os.Stat(sandboxes); os.IsNotExist(err) {
		return func(string) bool { return false }, nil
	}
	inUse, err := local.TemplatesInUse(sandboxes)
	if err != nil {
		return nil, err
	}
	return func(digest string) bool { return inUse[digest] }, nil
}

// APIClient is the client of the Cove server in COVE_SERVER, with the
// key in COVE_API_KEY, for the calls that are not about one sandbox:
// keys, quotas, usage.
func APIClient() (*remote.Runtime, error) {
	u, k := os.Getenv("COVE_SERVER"), os.Getenv("COVE_API_KEY")
	if u == "" || k == "" {
		return nil, errors.New("set COVE_SERVER (the server's URL) and COVE_API_KEY (cove serve prints the first admin key)")
	}
	return remote.New(remote.Config{URL: u, APIKey: k})
}

// BenchClient is the client `cove bench --server` times the server at url
// with: the team of key, with conns connections kept open to it.
func BenchClient(url, key string, conns int) (*remote.Runtime, error) {
	return remote.New(remote.Config{URL: url, APIKey: key, HTTPClient: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}}})
}
