package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/internal/app"
	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/server"
)

const serveUsage = `Usage: cove serve [flags]

Runs the Cove server: the /v1 API for sandboxes (API keys per team,
quotas, TTL and idle timeouts, exec streams, files, snapshots, exposed
ports, usage), over the local runtime, with its records in SQLite in
--data, or in PostgreSQL with --store postgres://... (several replicas
may share one database). The first start prints an admin key; keep it.
Lost it? Root on this machine makes another from the data directory:
  cove key create --admin --data DIR
(with PostgreSQL: cove key create --admin --store postgres://...)

Flags:
`

func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), serveUsage); fs.PrintDefaults() }
	addr := fs.String("addr", "127.0.0.1:7300", "address to listen on")
	data := fs.String("data", "", "directory for the database, snapshots and sandboxes (default: Cove's state directory/server)")
	storeURL := fs.String("store", os.Getenv("COVE_STORE"), app.StoreFlagUsage)
	stateDir := fs.String("state-dir", "", "Cove's state directory (templates are shared with cove template)")
	domain := fs.String("domain", "", "domain for port URLs {port}-{id}.DOMAIN (needs wildcard DNS to this server; default: localhost and the port a request came to, which reaches this server from its own machine)")
	e2bNetwork := fs.String("e2b-network", "internet", `network of sandboxes made through the E2B API whose create does not set allowInternetAccess: "internet" (E2B's default) or "none" (Cove's API keeps none)`)
	baseURL := fs.String("url", "", "how clients reach this server, for the URLs it returns (default http(s)://ADDR)")
	certFile := fs.String("tls-cert", "", "TLS certificate file (PEM)")
	keyFile := fs.String("tls-key", "", "TLS key file (PEM)")
	logFormat := fs.String("log-format", "text", "text or json")
	defaultTTL := fs.Duration("default-ttl", 30*time.Minute, "TTL of sandboxes whose create names none")
	retention := fs.Duration("retention", 7*24*time.Hour, "delete stopped sandboxes this long after they stopped (0 keeps them)")
	maxBody := fs.Int64("max-body", 1<<20, "largest JSON request body, bytes")
	maxUpload := fs.Int64("max-upload", 1<<30, "largest file or tar upload, bytes")
	replicas := fs.Bool("replicas", false, "other cove serve processes share this --data directory on this host (its SQLite store and sandboxes): elect one lifecycle loop and lock records through the store (always so with a shared store such as PostgreSQL)")
	pool := fs.Int("pool", 2, "sandboxes of the default size to keep started ahead, so a create takes one at once (0: none)")
	secretKeyFile := fs.String("secret-key-file", os.Getenv("COVE_SECRET_KEY_FILE"), "file of the key that seals web UI sessions and team secrets (32 bytes, raw, hex or base64; mode 0600 or 0440): the same file on every replica, so a session signed in on one is accepted by all ($COVE_SECRET_KEY_FILE; default: DATA/secret.key, made on first start)")
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
	var outboundAllow clibase.MultiFlag
	fs.Var(&outboundAllow, "outbound-allow", "a non-public target the server may connect to for tenants (a run's agent.base_url, webhooks, git_repo clones): CIDR, address or host name, an address or name with an optional :port, e.g. 127.0.0.1:11434 for a local Ollama; comma-separated or repeated (default: public addresses only; cloud metadata never)")
	maxPids := fs.Int("max-pids", 8192, "the largest pids limit (processes and threads) a sandbox create may ask for")
	unlimitedPids := fs.Bool("allow-unlimited-pids", false, "let creates ask for no pids limit (pids -1)")
	allowPrivate := fs.String("network-allow-private", os.Getenv("COVE_NETWORK_ALLOW_PRIVATE"), "comma-separated IPv4 CIDRs, otherwise unreachable (private ranges, the host's networks), that a sandbox's network allow list may name; cloud metadata and this host's own addresses never ($COVE_NETWORK_ALLOW_PRIVATE; default none)")
	runtimeFlag := runtimeFlags(fs)
	if err := clibase.ParseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cove serve: unexpected argument %q\n", fs.Arg(0))
		return clibase.ErrUsage
	}
	kubeCfg, err := runtimeFlag(*allowPrivate, stderr)
	if err != nil {
		return err
	}
	if *e2bNetwork != "internet" && *e2bNetwork != "none" {
		fmt.Fprintf(stderr, "cove serve: --e2b-network %q: use internet or none\n", *e2bNetwork)
		return clibase.ErrUsage
	}
	if (*certFile == "") != (*keyFile == "") {
		fmt.Fprintln(stderr, "cove serve: give both --tls-cert and --tls-key, or neither")
		return clibase.ErrUsage
	}
	limits := server.Limits{ReadHeaderTimeout: *readHeaderTimeout, IdleTimeout: *idleTimeout, ReadTimeout: *readTimeout,
		WriteTimeout: *writeTimeout, MaxConnsPerClient: *maxPerClient, MaxConns: *maxConns}
	if err := checkLimits(&limits, *trustedProxies, stderr); err != nil {
		return err
	}
	log, err := serveLogger(*logFormat, stderr)
	if err != nil {
		return err
	}
	var secretKey []byte
	if *secretKeyFile != "" {
		if secretKey, err = server.ReadSecretKeyFile(*secretKeyFile); err != nil {
			return err
		}
	}
	prices, err := readPrices(*pricesFile)
	if err != nil {
		return err
	}
	return app.Serve(ctx, app.ServeConfig{
		Addr: *addr, StateDir: *stateDir, Pool: *pool, Kube: kubeCfg, AllowPrivate: *allowPrivate, Replicas: *replicas,
		CertFile: *certFile, KeyFile: *keyFile, Limits: limits, Store: *storeURL,
		Server: server.Config{
			DataDir: *data, Domain: *domain, E2BNetwork: *e2bNetwork, BaseURL: *baseURL, Logger: log,
			DefaultTTL: *defaultTTL, Retention: retentionFlag(*retention), MaxBodyBytes: *maxBody, MaxUploadBytes: *maxUpload, Prices: prices,
			Model:         server.ModelConfig{BaseURL: *modelBase, APIKey: os.Getenv("OPENAI_API_KEY"), API: *modelAPI, DefaultModel: *model},
			OutboundAllow: splitList(outboundAllow), MaxPids: *maxPids, AllowUnlimitedPids: *unlimitedPids, SecretKey: secretKey,
		},
		Admin: func(key, url string) {
			fmt.Fprintf(stdout, "admin API key (shown once; keep it):\n  export COVE_SERVER=%s COVE_API_KEY=%s\nweb UI: %s/ (sign in with that key)\n", url, key, url)
		},
		Existing: func(dir string) {
			if app.IsPostgres(*storeURL) {
				fmt.Fprintln(stdout, "existing data in the PostgreSQL store: sign in with its admin key (lost it? cove key create --admin --store URL, with this server's --store)")
				return
			}
			fmt.Fprintf(stdout, "existing data in %s: sign in with its admin key (lost it? run as root: cove key create --admin --data %s)\n", dir, shellQuote(dir))
		},
	})
}

// checkLimits checks the timeouts and connection caps of l as flags give
// them (a --max-conns-per-client of 0 is no cap) and adds the
// --trusted-proxies to it; a wrong one is a usage error.
func checkLimits(l *server.Limits, trustedProxies string, stderr io.Writer) error {
	for _, d := range []time.Duration{l.ReadHeaderTimeout, l.IdleTimeout, l.ReadTimeout, l.WriteTimeout} {
		if d <= 0 {
			fmt.Fprintln(stderr, "cove serve: timeouts must be positive")
			return clibase.ErrUsage
		}
	}
	if l.MaxConnsPerClient < 0 || l.MaxConns < 0 {
		fmt.Fprintln(stderr, "cove serve: --max-conns and --max-conns-per-client must not be negative")
		return clibase.ErrUsage
	}
	if l.MaxConnsPerClient == 0 {
		l.MaxConnsPerClient = -1
	}
	for _, p := range strings.Split(trustedProxies, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			a, aerr := netip.ParseAddr(p)
			if aerr != nil {
				fmt.Fprintf(stderr, "cove serve: --trusted-proxies: %q is neither an address nor a CIDR\n", p)
				return clibase.ErrUsage
			}
			pfx = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		l.TrustedProxies = append(l.TrustedProxies, pfx.Masked())
	}
	return nil
}

// serveLogger is the server's log, on stderr in --log-format.
func serveLogger(format string, stderr io.Writer) (*slog.Logger, error) {
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(stderr, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, nil)), nil
	}
	fmt.Fprintln(stderr, "cove serve: --log-format: use text or json")
	return nil, clibase.ErrUsage
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

// shellQuote is s as one shell word: as is when it is plain, else in
// single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// runtimeFlags defines --runtime and the --kube-* flags on fs; the
// returned func, after parsing, gives the kube runtime's options (nil
// for local), or a usage error for an unknown runtime.
func runtimeFlags(fs *flag.FlagSet) func(allowPrivate string, stderr io.Writer) (*runtimes.KubeOptions, error) {
	runtimeName := fs.String("runtime", "local", `where sandboxes run: "local" (this machine, needs root) or "kube" (pods in a Kubernetes cluster, see the --kube-* flags)`)
	var kubeOpts runtimes.KubeOptions
	fs.StringVar(&kubeOpts.Kubeconfig, "kubeconfig", "", "--runtime kube: the cluster's kubeconfig file (default $KUBECONFIG, the pod's service account in the cluster, then ~/.kube/config)")
	fs.StringVar(&kubeOpts.Namespace, "kube-namespace", "default", "--runtime kube: the namespace of the sandboxes' pods, claims, secrets and network policies")
	fs.StringVar(&kubeOpts.StorageClass, "kube-storage-class", "", "--runtime kube: the StorageClass of workspaces (default: the cluster's default); fork needs one that copies a claim (dataSource)")
	fs.StringVar(&kubeOpts.ImagePrefix, "kube-image-prefix", "cove/", "--runtime kube: put before a template's name to make its image (cove template push tags cove/NAME:latest)")
	fs.StringVar(&kubeOpts.RuntimeClasses, "kube-runtime-classes", "", "--runtime kube: isolation tiers' RuntimeClasses, e.g. gvisor=runsc (a tier missing is refused; native: the node's default)")
	fs.StringVar(&kubeOpts.ClusterCIDRs, "kube-cluster-cidrs", "", "--runtime kube: the cluster's pod and service CIDRs, comma-separated: sandboxes never reach them")
	return func(allowPrivate string, stderr io.Writer) (*runtimes.KubeOptions, error) {
		switch *runtimeName {
		case "local":
			return nil, nil
		case "kube":
			kubeOpts.AllowPrivate = allowPrivate
			return &kubeOpts, nil
		}
		fmt.Fprintf(stderr, "cove serve: --runtime %q: use local or kube\n", *runtimeName)
		return nil, clibase.ErrUsage
	}
}

// readPrices reads --prices ("" for none).
func readPrices(file string) (server.Prices, error) {
	var prices server.Prices
	if file == "" {
		return prices, nil
	}
	b, err := os.ReadFile(file)
	if err == nil {
		err = json.Unmarshal(b, &prices)
	}
	if err != nil {
		return prices, fmt.Errorf("reading --prices %s: %v", file, err)
	}
	return prices, nil
}
