package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local"
	"github.com/cove-sandbox/cove/server"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/sqlite"
)

// ServeConfig is how `cove serve` runs: where it listens, the local
// runtime under it, and the server's own configuration.
type ServeConfig struct {
	// Addr is the address to listen on.
	Addr string
	// StateDir is Cove's state directory (DataDir's rules), whose
	// templates the server shares with `cove template`.
	StateDir string
	// Pool is how many sandboxes of the default size are kept started
	// ahead; AllowPrivate is --network-allow-private.
	Pool         int
	AllowPrivate string
	// CertFile and KeyFile, when set, serve TLS (HTTP/2 and 1.1).
	CertFile, KeyFile string
	// Limits are the HTTP server's timeouts and connection caps.
	Limits server.Limits
	// Store is --store: "" or "sqlite" (DataDir/cove.db), or a
	// postgres:// URL (OpenStore).
	Store string
	// Server is the server's configuration. Runtime and Store are made
	// here: the local runtime, and the store Store names. An empty
	// DataDir is StateDir's "server"; an empty BaseURL is
	// http(s)://the address listened on; a nil Logger discards.
	Server server.Config
	// Admin, when set, is told the first admin key (made on the first
	// start only) and the server's URL, before it serves.
	Admin func(key, url string)
	// Kube, when set, runs the sandboxes on Kubernetes (cove serve
	// --runtime kube) instead of this machine; Pool is then unused.
	Kube *runtimes.KubeOptions
	// Replicas says other servers share this one's SQLite store and
	// runtime directory (one host): it takes part in the store's leases
	// as it always does on a shared store (see sharedLease).
	Replicas bool
	// Existing, when set, is told the data directory (absolute) when the
	// store already had keys, so that a start on existing data can say
	// how to get back in without the admin key.
	Existing func(dataDir string)
}

// Serve runs a Cove server until ctx ends, then shuts it down gracefully:
// requests get a while to finish, streams still open are cut (their
// sandboxes live on), and the server's own pool of sandboxes is drained.
func Serve(ctx context.Context, cfg ServeConfig) error {
	s, err := openServer(ctx, &cfg)
	if err != nil {
		return err
	}
	defer s.close(ctx)
	hs, l := s.srv.HTTPServer(s.l, cfg.Limits)
	log := cfg.Server.Logger
	hs.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	if cfg.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			l.Close()
			return fmt.Errorf("loading the TLS certificate: %w", err)
		}
		// h2 first: E2B's SDKs ask for HTTP/2 and multiplex their envd
		// streams over one connection.
		hs.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
		l = s.srv.ListenTLS(hs, l, hs.TLSConfig)
	}
	url := cfg.Server.BaseURL
	log.Info("cove server listening", "addr", l.Addr().String(), "url", url, "web_ui", url+"/", "data", cfg.Server.DataDir)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	// Close first: open streams end with an error event saying why, then
	// the HTTP server has nothing left to wait for.
	s.srv.Close()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	return nil
}

// running is a started server and what it runs on.
type running struct {
	rt    sandbox.Runtime
	pool  *local.Runtime // the local runtime's pool, nil on kube
	store store.Store
	srv   *server.Server
	l     net.Listener
}

// openServer makes the runtime, the store, the listener and the server
// of cfg (filling its defaults), tells cfg.Admin, reconciles the records
// with the runtime and starts the server's loops and pool.
func openServer(ctx context.Context, cfg *ServeConfig) (*running, error) {
	sc := &cfg.Server
	if sc.Logger == nil {
		sc.Logger = slog.New(slog.DiscardHandler)
	}
	if sc.DataDir == "" {
		sc.DataDir = filepath.Join(runtimes.DataDir(cfg.StateDir), "server")
	}
	if err := os.MkdirAll(sc.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating --data %s: %w", sc.DataDir, err)
	}
	// The store first: a wrong --store fails before the runtime starts.
	st, err := OpenStore(ctx, cfg.Store, sc.DataDir)
	if err != nil {
		return nil, err
	}
	s := &running{store: st}
	if cfg.Kube != nil {
		krt, err := runtimes.Kube(*cfg.Kube)
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("starting the kube runtime: %w", err)
		}
		s.rt = krt
	} else {
		rt, err := runtimes.Server(cfg.StateDir, sc.DataDir, cfg.Pool, cfg.AllowPrivate)
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("starting the local runtime (cove serve runs sandboxes on this machine and needs root): %w", err)
		}
		s.rt, s.pool = rt, rt
	}
	if err := s.start(ctx, cfg); err != nil {
		if s.l != nil {
			s.l.Close()
		}
		st.Close()
		return nil, err
	}
	return s, nil
}

// start listens, makes the server over s's runtime and store, and starts
// it.
func (s *running) start(ctx context.Context, cfg *ServeConfig) error {
	sc := &cfg.Server
	l, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.Addr, err)
	}
	s.l = l
	if sc.BaseURL == "" {
		scheme := "http"
		if cfg.CertFile != "" {
			scheme = "https"
		}
		sc.BaseURL = scheme + "://" + l.Addr().String()
	}
	sc.Runtime, sc.Store = s.rt, s.store
	if sc.Lease == nil {
		sc.Lease = sharedLease(s.store, cfg.Replicas)
	}
	// Agent runs call the model through openai-go; without a base URL,
	// OpenAI's own.
	sc.Model.BaseURL = ModelBaseURL(sc.Model.BaseURL)
	if sc.Models == nil {
		sc.Models = Models(sc.Logger)
	}
	if s.srv, err = server.New(*sc); err != nil {
		return err
	}
	admin, err := s.srv.EnsureAdmin(ctx)
	if err != nil {
		return err
	}
	if admin != "" && cfg.Admin != nil {
		cfg.Admin(admin, sc.BaseURL)
	}
	if admin == "" && cfg.Existing != nil {
		abs, _ := filepath.Abs(sc.DataDir)
		cfg.Existing(abs)
	}
	if err := s.srv.Reconcile(ctx); err != nil {
		return err
	}
	s.srv.Start()
	if s.pool != nil {
		s.pool.FillPool()
	}
	return nil
}

// close stops the server and drains its pool: the pool is the server's
// own, so a clean stop leaves none of it running (teams' sandboxes stay
// up for the next start).
func (s *running) close(ctx context.Context) {
	if s.pool != nil {
		s.pool.WaitPool()
		s.pool.DrainPool(context.WithoutCancel(ctx))
	}
	s.srv.Close()
	if c, ok := s.rt.(io.Closer); ok {
		c.Close()
	}
	s.store.Close()
}

// BenchServer starts a Cove server for `cove bench --server` in dir, on
// 127.0.0.1 over the local runtime (two sandboxes kept ready) and SQLite,
// and returns its URL, its admin key and the function that stops it and
// deletes every sandbox it made.
func BenchServer(ctx context.Context, dir string) (url, key string, stop func(), err error) {
	if os.Geteuid() != 0 {
		return "", "", nil, fmt.Errorf("bench --server without a URL starts a server on the local runtime, which needs root")
	}
	rt, err := runtimes.Server("", dir, 2, "")
	if err != nil {
		return "", "", nil, err
	}
	st, err := sqlite.Open(ctx, filepath.Join(dir, "cove.db"))
	if err != nil {
		return "", "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.Close()
		return "", "", nil, err
	}
	url = "http://" + l.Addr().String()
	srv, err := server.New(server.Config{Runtime: rt, Store: st, DataDir: dir, BaseURL: url})
	if err == nil {
		key, err = srv.EnsureAdmin(ctx)
	}
	if err != nil {
		l.Close()
		st.Close()
		return "", "", nil, err
	}
	srv.Start()
	rt.FillPool()
	rt.WaitPool()
	hs := &http.Server{Handler: srv.Handler()}
	go hs.Serve(l)
	stop = func() {
		bg := context.Background()
		if infos, err := rt.List(bg); err == nil {
			for _, in := range infos {
				rt.Delete(bg, in.ID)
			}
		}
		hs.Close()
		rt.DrainPool(bg)
		srv.Close()
		st.Close()
	}
	return url, key, stop, nil
}
