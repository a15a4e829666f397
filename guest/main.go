package guest

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// DefaultTCPPort is envd's port, used when the daemon listens on TCP.
const DefaultTCPPort = 49983

// TokenEnv carries the access token to the daemon without putting it on
// its command line, where any process could read it.
const TokenEnv = "COVE_GUEST_TOKEN"

// EnvEnv carries more of every process's environment, as a JSON object of
// names to values, added after --env: a runtime that starts the daemon
// from a spec it cannot put on a command line (the kube runtime takes it
// from a Secret) sets it. Like TokenEnv it is removed from the daemon's
// own environment once read.
const EnvEnv = "COVE_GUEST_ENV"

// Main runs the daemon as a command: `cove guest [flags]`. It serves until
// SIGTERM or SIGINT (or ctx ends), then kills the processes it started.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("guest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", "/", "host directory that is the sandbox's /")
	workdir := fs.String("workdir", "/workspace", "sandbox path of the workspace: the default cwd and the base of relative paths")
	listen := fs.String("listen", "", "where to serve: unix:///path/to.sock or tcp://host:port (default tcp://0.0.0.0:49983)")
	user := fs.String("user", "", "default user processes run as (name or uid in the sandbox's /etc/passwd)")
	keepalive := fs.Duration("keepalive", 30*time.Second, "keepalive interval on long streams")
	buffer := fs.Int("buffer", 4<<20, "output bytes kept per process for a reattaching client")
	var envs multiFlag
	fs.Var(&envs, "env", "KEY=VALUE added to every process's environment (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	env := map[string]string{}
	for _, kv := range envs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
		env[k] = v
	}
	if v, ok := os.LookupEnv(EnvEnv); ok {
		os.Unsetenv(EnvEnv)
		var more map[string]string
		if err := json.Unmarshal([]byte(v), &more); err != nil {
			return fmt.Errorf("$%s: want a JSON object of names to string values: %w", EnvEnv, err)
		}
		for k, v := range more {
			env[k] = v
		}
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	token := os.Getenv(TokenEnv)
	os.Unsetenv(TokenEnv)
	srv, err := NewServer(Config{
		Root: *root, Workdir: *workdir, AccessToken: token, Env: env, User: *user,
		KeepAlive: *keepalive, OutputBuffer: *buffer, Reap: true, Logger: log,
	})
	if err != nil {
		return err
	}
	l, err := listenOn(*listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Info("cove guest serving", "addr", l.Addr().String(), "root", *root, "workdir", *workdir)
	err = srv.Serve(ctx, l)
	srv.Close()
	return err
}

func listenOn(addr string) (net.Listener, error) {
	switch {
	case addr == "":
		return net.Listen("tcp", fmt.Sprintf("0.0.0.0:%d", DefaultTCPPort))
	case strings.HasPrefix(addr, "unix://"):
		p := strings.TrimPrefix(addr, "unix://")
		os.Remove(p)
		l, err := net.Listen("unix", p)
		if err != nil {
			return nil, fmt.Errorf("listening on %s: %w", addr, err)
		}
		os.Chmod(p, 0o600)
		return l, nil
	case strings.HasPrefix(addr, "tcp://"):
		return net.Listen("tcp", strings.TrimPrefix(addr, "tcp://"))
	}
	return nil, fmt.Errorf("--listen %q: want unix:///path or tcp://host:port", addr)
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
