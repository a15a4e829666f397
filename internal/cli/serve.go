package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cove-sandbox/cove/internal/app"
	"github.com/cove-sandbox/cove/server"
	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/store/sqlite"
)

const serveUsage = `Usage: cove serve [flags]

Runs the Cove server: the /v1 API for sandboxes (API keys per team,
quotas, TTL and idle timeouts, exec streams, files, snapshots, exposed
ports, usage), over the local runtime, with its records in SQLite in
--data. The first start prints an admin key; keep it.

Flags:
`

func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, serveUsage); fs.PrintDefaults() }
	addr := fs.String("addr", "127.0.0.1:7300", "address to listen on")
	data := fs.String("data", "", "directory for the database, snapshots and sandboxes (default: Cove's state directory/server)")
	stateDir := fs.String("state-dir", "", "Cove's state directory (templates are shared with cove template)")
	domain := fs.String("domain", "", "domain for port URLs {port}-{id}.DOMAIN (needs wildcard DNS to this server)")
	baseURL := fs.String("url", "", "how clients reach this server, for the URLs it returns (default http(s)://ADDR)")
	certFile := fs.String("tls-cert", "", "TLS certificate file (PEM)")
	keyFile := fs.String("tls-key", "", "TLS key file (PEM)")
	logFormat := fs.String("log-format", "text", "text or json")
	defaultTTL := fs.Duration("default-ttl", 30*time.Minute, "TTL of sandboxes whose create names none")
	retention := fs.Duration("retention", 7*24*time.Hour, "delete stopped sandboxes this long after they stopped (0 keeps them)")
	maxBody := fs.Int64("max-body", 1<<20, "largest JSON request body, bytes")
	maxUpload := fs.Int64("max-upload", 1<<30, "largest file or tar upload, bytes")
	pool := fs.Int("pool", 2, "sandboxes of the default size to keep started ahead, so a create takes one at once (0: none)")
	pricesFile := fs.String("prices", "", `JSON price table for usage costs: {"cpu_second":..,"memory_gib_second":..,"disk_gib_hour":..,"egress_gib":..}`)
	modelBase := fs.String("model-base-url", os.Getenv("OPENAI_BASE_URL"), "the model endpoint of agent runs (POST /v1/runs), OpenAI-compatible; its key is $OPENAI_API_KEY and is sent nowhere else ($OPENAI_BASE_URL; default OpenAI)")
	model := fs.String("model", os.Getenv("COVE_MODEL"), "model of agent runs that name none ($COVE_MODEL; default gpt-5.1 at OpenAI)")
	modelAPI := fs.String("model-api", "", `"responses" or "chat" for --model-base-url (default: responses for OpenAI, chat otherwise)`)
	readHeaderTimeout := fs.Duration("read-header-timeout", 10*time.Second, "longest wait for a request's headers (and a TLS handshake)")
	idleTimeout := fs.Duration("idle-timeout", 90*time.Second, "close a keep-alive connection after this long without a request")
	readTimeout := fs.Duration("read-timeout", 60*time.Second, "longest a request body may stall (no byte arriving); a slow upload that keeps moving is not cut")
	writeTimeout := fs.Duration("write-timeout", 60*time.Second, "longest a write to a client may block (the client not reading); a quiet stream is not cut")
	maxPerClient := fs.Int("max-conns-per-client", 256, "most connections open at once from one client address (an IPv6 /64); 0: no cap")
	maxConns := fs.Int("max-conns", 0, "most connections open at once in all (default: half the open-file limit)")
	trustedProxies := fs.String("trusted-proxies", "", "comma-separated addresses or CIDRs of reverse proxies in front of the server: their X-Forwarded-For names the client for --max-conns-per-client (ignored from anyone else)")
	var outboundAllow multiFlag
	fs.Var(&outboundAllow, "outbound-allow", "a non-public target the server may connect to for tenants (a run's agent.base_url, webhooks, git_repo clones): CIDR, address or host name, an address or name with an optional :port, e.g. 127.0.0.1:11434 for a local Ollama; comma-separated or repeated (default: public addresses only; cloud metadata never)")
	maxPids := fs.Int("max-pids", 8192, "the largest pids limit (processes and threads) a sandbox create may ask for")
	unlimitedPids := fs.Bool("allow-unlimited-pids", false, "let creates ask for no pids limit (pids -1)")
	allowPrivate := fs.String("network-allow-private", os.Getenv("COVE_NETWORK_ALLOW_PRIVATE"), "comma-separated IPv4 CIDRs, otherwise unreachable (private ranges, the host's networks), that a sandbox's network allow list may name; cloud metadata and this host's own addresses never ($COVE_NETWORK_ALLOW_PRIVATE; default none)")
	if err := fs.Parse(args); err != nil {
		return ErrUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cove serve: unexpected argument %q\n", fs.Arg(0))
		return ErrUsage
	}
	if (*certFile == "") != (*keyFile == "") {
		fmt.Fprintln(stderr, "cove serve: give both --tls-cert and --tls-key, or neither")
		return ErrUsage
	}
	limits := server.Limits{ReadHeaderTimeout: *readHeaderTimeout, IdleTimeout: *idleTimeout, ReadTimeout: *readTimeout,
		WriteTimeout: *writeTimeout, MaxConnsPerClient: *maxPerClient, MaxConns: *maxConns}
	if *maxPerClient == 0 {
		limits.MaxConnsPerClient = -1
	}
	for _, d := range []time.Duration{*readHeaderTimeout, *idleTimeout, *readTimeout, *writeTimeout} {
		if d <= 0 {
			fmt.Fprintln(stderr, "cove serve: timeouts must be positive")
			return ErrUsage
		}
	}
	if *maxPerClient < 0 || *maxConns < 0 {
		fmt.Fprintln(stderr, "cove serve: --max-conns and --max-conns-per-client must not be negative")
		return ErrUsage
	}
	for _, p := range strings.Split(*trustedProxies, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			a, aerr := netip.ParseAddr(p)
			if aerr != nil {
				fmt.Fprintf(stderr, "cove serve: --trusted-proxies: %q is neither an address nor a CIDR\n", p)
				return ErrUsage
			}
			pfx = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		limits.TrustedProxies = append(limits.TrustedProxies, pfx.Masked())
	}
	var handler slog.Handler
	switch *logFormat {
	case "text":
		handler = slog.NewTextHandler(stderr, nil)
	case "json":
		handler = slog.NewJSONHandler(stderr, nil)
	default:
		fmt.Fprintln(stderr, "cove serve: --log-format: use text or json")
		return ErrUsage
	}
	log := slog.New(handler)
	if *data == "" {
		*data = filepath.Join(dataDir(*stateDir), "server")
	}
	if err := os.MkdirAll(*data, 0o700); err != nil {
		return fmt.Errorf("creating --data %s: %w", *data, err)
	}
	var prices server.Prices
	if *pricesFile != "" {
		b, err := os.ReadFile(*pricesFile)
		if err == nil {
			err = json.Unmarshal(b, &prices)
		}
		if err != nil {
			return fmt.Errorf("reading --prices %s: %v", *pricesFile, err)
		}
	}
	rt, err := serverRuntime(*stateDir, *data, *pool, *allowPrivate)
	if err != nil {
		return fmt.Errorf("starting the local runtime (cove serve runs sandboxes on this machine and needs root): %w", err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(*data, "cove.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", *addr, err)
	}
	scheme := "http"
	if *certFile != "" {
		scheme = "https"
	}
	if *baseURL == "" {
		*baseURL = scheme + "://" + l.Addr().String()
	}
	srv, err := server.New(server.Config{
		Runtime: rt, Store: st, DataDir: *data, Domain: *domain, BaseURL: *baseURL, Logger: log,
		DefaultTTL: *defaultTTL, Retention: retentionFlag(*retention), MaxBodyBytes: *maxBody, MaxUploadBytes: *maxUpload, Prices: prices,
		Model:         server.ModelConfig{BaseURL: app.ModelBaseURL(*modelBase), APIKey: os.Getenv("OPENAI_API_KEY"), API: *modelAPI, DefaultModel: *model},
		Models:        app.Models(log),
		OutboundAllow: splitList(outboundAllow), MaxPids: *maxPids, AllowUnlimitedPids: *unlimitedPids,
	})
	if err != nil {
		l.Close()
		return err
	}
	admin, err := srv.EnsureAdmin(ctx)
	if err != nil {
		l.Close()
		return err
	}
	if admin != "" {
		fmt.Fprintf(stdout, "admin API key (shown once; keep it):\n  export COVE_SERVER=%s COVE_API_KEY=%s\nweb UI: %s/ (sign in with that key)\n", *baseURL, admin, *baseURL)
	}
	if err := srv.Reconcile(ctx); err != nil {
		l.Close()
		return err
	}
	srv.Start()
	defer srv.Close()
	rt.FillPool()
	// The pool is the server's own: a clean stop leaves none of it
	// running (teams' sandboxes stay up for the next start).
	defer func() {
		rt.WaitPool()
		rt.DrainPool(context.WithoutCancel(ctx))
	}()
	// Timeouts and connection caps (server.Limits): the listener counts
	// connections below TLS, so a refused one costs no handshake.
	hs, l := srv.HTTPServer(l, limits)
	hs.ErrorLog = slog.NewLogLogger(handler, slog.LevelWarn)
	if *certFile != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			l.Close()
			return fmt.Errorf("loading the TLS certificate: %w", err)
		}
		// h2 first: E2B's SDKs ask for HTTP/2 and multiplex their envd
		// streams over one connection.
		hs.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
		l = tls.NewListener(l, hs.TLSConfig)
	}
	log.Info("cove server listening", "addr", l.Addr().String(), "url", *baseURL, "web_ui", *baseURL+"/", "data", *data)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Graceful: stop accepting, let requests finish for a while; streams
	// still open then are cut (their sandboxes live on).
	log.Info("shutting down")
	// Close first: open streams end with an error event saying why, then
	// the HTTP server has nothing left to wait for.
	srv.Close()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	return nil
}

// splitList is a repeated flag's values, each split at commas.
func splitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, e := range strings.Split(v, ",") {
			if e = strings.TrimSpace(e); e != "" {
				out = append(out, e)
			}
		}
	}
	return out
}

func retentionFlag(d time.Duration) time.Duration {
	if d == 0 {
		return -1 // keep
	}
	return d
}

// keyCmd is `cove key`: API keys on a Cove server.
func keyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = `Usage:
  cove key create NAME [--team T | --new-team T] [--admin] [--e2b]
                                                              make a key (its secret is shown once;
                                                              --e2b: in E2B's e2b_... form, for E2B_API_KEY)
  cove key ls [--all]                                         list keys (of your team; --all: every team, admin)
  cove key revoke ID                                          revoke a key

They talk to the server in COVE_SERVER with the key in COVE_API_KEY.
`
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ErrUsage
	}
	c, err := apiClientFromEnv()
	if err != nil {
		return err
	}
	switch args[0] {
	case "create":
		fs := flag.NewFlagSet("key create", flag.ContinueOnError)
		fs.SetOutput(stderr)
		team := fs.String("team", "", "team of the key (admin)")
		newTeam := fs.String("new-team", "", "make this team and a key for it (admin)")
		admin := fs.Bool("admin", false, "an admin key (admin)")
		e2b := fs.Bool("e2b", false, "a key in E2B's form (e2b_...), for E2B SDKs' E2B_API_KEY")
		name, rest := "", args[1:]
		if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
			name, rest = rest[0], rest[1:]
		}
		if err := fs.Parse(rest); err != nil {
			return ErrUsage
		}
		if name == "" && fs.NArg() > 0 {
			name = fs.Arg(0)
		}
		if name == "" {
			fmt.Fprint(stderr, "cove key create: name the key\n\n"+usage)
			return ErrUsage
		}
		var k api.Key
		req := api.CreateKey{Name: name, Team: *team, NewTeam: *newTeam, Admin: *admin}
		if *e2b {
			req.Format = "e2b"
		}
		if err := c.do(ctx, "POST", "/v1/keys", req, &k); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", k.Secret)
		fmt.Fprintf(stderr, "key %s of team %s (shown once; keep it)\n", k.ID, k.Team)
		return nil
	case "ls", "list":
		path := "/v1/keys"
		if len(args) > 1 && args[1] == "--all" {
			path += "?all=true"
		}
		var out struct{ Keys []api.Key }
		if err := c.do(ctx, "GET", path, nil, &out); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tTEAM\tPREFIX\tADMIN\tCREATED\tREVOKED")
		for _, k := range out.Keys {
			rev := ""
			if k.RevokedAt != nil {
				rev = k.RevokedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s…\t%v\t%s\t%s\n", k.ID, k.Name, k.Team, k.Prefix, k.Admin, k.CreatedAt.Format(time.RFC3339), rev)
		}
		return tw.Flush()
	case "revoke":
		if len(args) != 2 {
			fmt.Fprint(stderr, "cove key revoke: give one key id\n\n"+usage)
			return ErrUsage
		}
		if err := c.do(ctx, "DELETE", "/v1/keys/"+args[1], nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "revoked %s\n", args[1])
		return nil
	}
	fmt.Fprintf(stderr, "cove key: unknown command %q\n\n%s", args[0], usage)
	return ErrUsage
}

// apiClient is a small JSON client for the CLI's own API calls.
type apiClient struct {
	url, key string
	http     *http.Client
}

func apiClientFromEnv() (*apiClient, error) {
	u, k := os.Getenv("COVE_SERVER"), os.Getenv("COVE_API_KEY")
	if u == "" || k == "" {
		return nil, errors.New("set COVE_SERVER (the server's URL) and COVE_API_KEY (cove serve prints the first admin key)")
	}
	return &apiClient{url: strings.TrimSuffix(u, "/"), key: k, http: http.DefaultClient}, nil
}

// send makes an API call and returns the response of a success; an
// error response becomes an error with the server's message.
func (c *apiClient) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the Cove server at %s: %v", c.url, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		var e api.Error
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(data, &e) == nil && e.Message != "" {
			return nil, fmt.Errorf("%s (%s)", e.Message, e.Code)
		}
		return nil, fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return resp, nil
}

// do is send with the JSON response decoded into out (when not nil).
func (c *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if out != nil && len(data) > 0 {
		return json.Unmarshal(data, out)
	}
	return nil
}
