// Package sandboxcli is `cove sandbox`: create, list, exec in, copy,
// snapshot, stop, resume, fork and delete sandboxes. It imports only the
// runtimes (internal/app/runtimes), so a one-shot command such as
// `cove sandbox exec ID -- true` starts without the server's, the
// harness's or the store's packages.
package sandboxcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/manifest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/tarball"
)

const sandboxUsage = `Usage: cove sandbox COMMAND [flags]

Commands:
  create [--template T] [--ttl 30m] [--cpus 1] [--memory 512M] [--disk 2G] [--pids N]
         [--env K=V]... [--manifest FILE] [--isolation native|gvisor]
                                                  create and start a sandbox; prints its id
  ls                                              list sandboxes and their tiers
  exec ID [-i] [-t] [-e K=V]... [-w DIR] [-u USER] -- CMD [ARGS...]
                                                  run a command; exits with its exit code
  cp ID:PATH LOCAL | cp LOCAL ID:PATH             copy files and folders
  snapshot ID -o FILE.tar                         save the workspace as a tar
  stop ID | resume ID                             stop keeping the disk, resume
  pause [--keep-memory] ID                        pause: a gvisor sandbox keeps its processes
                                                  and memory; a native one is stopped (disk kept)
  fork [--count N] ID                             copy (a running gvisor one with its processes);
                                                  prints the new ids
  rm [-f] ID...                                   delete (-f stops a running one first)
  drain                                           delete the sandboxes kept ready for COVE_POOL

Environment:
  COVE_POOL=N       keep N sandboxes started ahead, so create hands one out at once
                    (host template, default workspace, no --disk; env, limits and TTL apply)
  COVE_NETWORK_ALLOW_PRIVATE=CIDR,...
                    ranges otherwise unreachable (private, this host's networks) that
                    --allow may name; cloud metadata and this host's addresses never
  COVE_SERVER=URL   work on a Cove server's sandboxes instead of this machine's
  COVE_API_KEY=KEY  the API key for COVE_SERVER

Flags for every command:
  --state-dir DIR   where sandboxes live (default /var/lib/cove as root, $XDG_DATA_HOME/cove otherwise)
  --server URL      a Cove server (as COVE_SERVER)
`

// Cmd is `cove sandbox`.
func Cmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	stateDir, args := extractStateDir(args)
	if len(args) == 0 {
		fmt.Fprint(stderr, sandboxUsage)
		return clibase.ErrUsage
	}
	server, args := extractFlag(args, "--server")
	if sandboxHelpAsked(args) {
		// Before the runtime: help opens no store and starts no pool.
		return sandboxHelpFor(ctx, args[0], stdout, stderr)
	}
	rt, err := runtimes.SandboxRuntime(stateDir, server)
	if err != nil {
		return err
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "create":
		return sandboxCreate(ctx, rt, args, stdout, stderr)
	case "ls", "list":
		return sandboxList(ctx, rt, stdout)
	case "exec":
		return sandboxExec(ctx, rt, args, stdout, stderr)
	case "cp":
		return sandboxCopy(ctx, rt, args, stderr)
	case "snapshot":
		return sandboxSnapshot(ctx, rt, args, stdout, stderr)
	case "stop":
		return eachID(args, func(id string) error { return rt.Stop(ctx, id) }, stdout, "stopped")
	case "resume":
		return eachID(args, func(id string) error { _, err := rt.Resume(ctx, id); return err }, stdout, "resumed")
	case "pause":
		return sandboxPause(ctx, rt, args, stdout, stderr)
	case "fork":
		return sandboxFork(ctx, rt, args, stdout, stderr)
	case "rm", "delete":
		return sandboxRemove(ctx, rt, args, stdout, stderr)
	case "drain":
		// Deletes the sandboxes kept ready by COVE_POOL.
		l, ok := rt.(interface{ DrainPool(context.Context) error })
		if !ok {
			return fmt.Errorf("drain empties the local runtime's pool; a server has none to drain")
		}
		return l.DrainPool(ctx)
	}
	return usageErr(stderr, fmt.Sprintf("unknown sandbox command %q", cmd))
}

// sandboxHelpAsked reports whether `cove sandbox args...` asks for help.
func sandboxHelpAsked(args []string) bool {
	switch sub, rest := args[0], args[1:]; {
	case sub == "help" || clibase.IsHelpFlag(sub):
		return true
	case sub == "exec":
		return execHelpAsked(rest)
	default:
		return clibase.HelpAsked(rest)
	}
}

// sandboxHelpFor prints the usage of `cove sandbox sub` on stdout.
func sandboxHelpFor(ctx context.Context, sub string, stdout, stderr io.Writer) error {
	help := []string{"-h"}
	switch sub {
	case "create":
		return sandboxCreate(ctx, nil, help, stdout, stderr)
	case "exec":
		return sandboxExec(ctx, nil, help, stdout, stderr)
	case "snapshot":
		return sandboxSnapshot(ctx, nil, help, stdout, stderr)
	case "rm", "delete":
		return sandboxRemove(ctx, nil, help, stdout, stderr)
	case "pause":
		return sandboxPause(ctx, nil, help, stdout, stderr)
	case "fork":
		return sandboxFork(ctx, nil, help, stdout, stderr)
	}
	if text, ok := sandboxHelp[sub]; ok {
		return clibase.ShowHelp(stdout, text)
	}
	return clibase.ShowHelp(stdout, sandboxUsage)
}

func usageErr(stderr io.Writer, msg string) error {
	fmt.Fprintf(stderr, "cove sandbox: %s\n\n%s", msg, sandboxUsage)
	return clibase.ErrUsage
}

// extractStateDir pulls --state-dir out of args wherever it is.
func extractStateDir(args []string) (string, []string) { return extractFlag(args, "--state-dir") }

// extractFlag pulls a "--name value" or "--name=value" flag out of args
// wherever it is before "--".
func extractFlag(args []string, name string) (string, []string) {
	val := ""
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			val = v
			continue
		}
		if a == name && i+1 < len(args) {
			val = args[i+1]
			i++
			continue
		}
		rest = append(rest, a)
	}
	return val, rest
}

func sandboxCreate(ctx context.Context, rt sandbox.Runtime, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("create", flag.ContinueOnError)
	clibase.SetUsage(fs, "Usage: cove sandbox create [flags]\n\nCreates and starts a sandbox; prints its id.\n")
	tmpl := fs.String("template", "", "template name (default host)")
	ttl := new(time.Duration)
	fs.Var(clibase.TTLFlag{D: ttl}, "ttl", "stop the sandbox this long after it starts: a duration with its unit, such as 30m or 1h (default: no TTL)")
	cpus := fs.Float64("cpus", 0, "CPU quota in cores, at most this machine's CPU count (or the server's)")
	mem := fs.String("memory", "", "memory limit (e.g. 512M, 2G)")
	disk := fs.String("disk", "", "disk limit for the sandbox's own writes (e.g. 2G)")
	// A finite default: one sandbox must not be able to take every pid of
	// the host (or of the server's host) with a fork bomb.
	pids := fs.Int("pids", 0, "maximum processes and threads of the sandbox's commands: at least 16; 0 (the default) takes the runtime's (1024 here, the size's on a server); -1: no limit, where the runtime allows it")
	man := fs.String("manifest", "", "workspace manifest (JSON, OpenAI Agents SDK format) to apply")
	var envs, allow clibase.MultiFlag
	fs.Var(&envs, "env", "KEY=VALUE for every command (repeatable)")
	network := fs.String("network", "none", "none (loopback only), internet (public addresses; not the host, private ranges or cloud metadata) or allow (only --allow)")
	fs.Var(&allow, "allow", "with --network allow: an address, CIDR or host, with an optional :port, the sandbox may reach (repeatable)")
	isolation := fs.String("isolation", "", "native (the default: the host's kernel behind namespaces, seccomp and Landlock) or gvisor (gVisor's user-space kernel; pause and fork keep processes and memory)")
	if err := clibase.ParseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	spec := sandbox.Spec{Template: *tmpl, TTL: *ttl, Limits: sandbox.Limits{CPUs: *cpus, Pids: *pids}, Env: map[string]string{},
		Network: sandbox.Network{Mode: *network, Allow: allow}, Isolation: *isolation}
	var err error
	if spec.Limits.MemoryBytes, err = clibase.ParseSize(*mem); err != nil {
		return fmt.Errorf("--memory: %w", err)
	}
	if spec.Limits.DiskBytes, err = clibase.ParseSize(*disk); err != nil {
		return fmt.Errorf("--disk: %w", err)
	}
	for _, kv := range envs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
		spec.Env[k] = v
	}
	var m *manifest.Manifest
	if *man != "" {
		data, err := os.ReadFile(*man)
		if err != nil {
			return fmt.Errorf("reading the manifest: %w", err)
		}
		if m, err = manifest.Parse(data); err != nil {
			return fmt.Errorf("manifest %s: %w", *man, err)
		}
		spec.Root = m.RootDir()
		for k, v := range m.Env() {
			if _, set := spec.Env[k]; !set {
				spec.Env[k] = v
			}
		}
	}
	t0 := time.Now()
	s, err := rt.Create(ctx, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "created sandbox %s in %s\n", s.ID(), time.Since(t0).Round(time.Millisecond))
	if m != nil {
		err := manifest.Apply(ctx, m, s, manifest.ApplyOptions{
			BaseDir:  filepath.Dir(*man),
			Progress: func(line string) { fmt.Fprintln(stderr, "  "+line) },
		})
		if err != nil {
			rt.Delete(context.WithoutCancel(ctx), s.ID())
			return fmt.Errorf("applying the manifest (sandbox deleted): %w", err)
		}
	}
	fmt.Fprintln(stdout, s.ID())
	// With COVE_POOL set, leave the pool full for the next create.
	if l, ok := rt.(interface{ WaitPool() }); ok {
		l.WaitPool()
	}
	return nil
}

func sandboxList(ctx context.Context, rt sandbox.Runtime, stdout io.Writer) error {
	infos, err := rt.List(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTIER\tTEMPLATE\tAGE\tTTL LEFT")
	now := time.Now()
	for _, in := range infos {
		tmpl := in.Spec.Template
		if tmpl == "" {
			tmpl = "host"
		}
		state := string(in.State)
		if in.Paused {
			state = "paused" // stopped with its memory
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", in.ID, state, tierOf(in), tmpl, shortDur(now.Sub(in.CreatedAt)), ttlLeft(in, now))
	}
	return tw.Flush()
}

// ttlLeft is how long sandbox in has before its TTL stops it: "-" with no
// TTL, "expired" once past it, the TTL itself while its clock has not
// started.
func ttlLeft(in sandbox.Info, now time.Time) string {
	switch {
	case !in.Deadline.IsZero() && !now.Before(in.Deadline):
		return "expired"
	case !in.Deadline.IsZero():
		return shortDur(in.Deadline.Sub(now))
	case in.Spec.TTL > 0:
		return shortDur(in.Spec.TTL) + " (from start)"
	}
	return "-"
}

// shortDur is d, cut to the second, in at most two units: 45s, 12m3s,
// 2h5m, 3d4h.
func shortDur(d time.Duration) string {
	d = max(0, d.Truncate(time.Second))
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

func sandboxExec(ctx context.Context, rt sandbox.Runtime, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	clibase.SetUsage(fs, "Usage: cove sandbox exec ID [-i] [-t] [-e K=V]... [-w DIR] [-u USER] -- CMD [ARGS...]\n\nRuns a command in a sandbox; exits with its exit code.\n")
	interactive := fs.Bool("i", false, "send our standard input to the command")
	tty := fs.Bool("t", false, "run the command on a terminal (implies -i)")
	dir := fs.String("w", "", "working directory (default: the workspace)")
	user := fs.String("u", "", "user to run as (default: the sandbox's user)")
	var envs clibase.MultiFlag
	fs.Var(&envs, "e", "KEY=VALUE (repeatable)")
	if len(args) == 0 {
		return usageErr(stderr, "exec needs a sandbox id and a command")
	}
	// Flags may come before or after the id, and -it is -i -t, as with
	// docker exec.
	var expanded []string
	for i, a := range args {
		if a == "--" {
			expanded = append(expanded, args[i:]...)
			break
		}
		if a == "-it" || a == "-ti" {
			expanded = append(expanded, "-i", "-t")
			continue
		}
		expanded = append(expanded, a)
	}
	var id string
	if !strings.HasPrefix(expanded[0], "-") {
		id, expanded = expanded[0], expanded[1:]
	}
	if err := clibase.ParseFlags(fs, expanded, stdout, stderr); err != nil {
		return err
	}
	argv := fs.Args()
	if id == "" {
		if len(argv) == 0 {
			return usageErr(stderr, "exec needs a sandbox id")
		}
		id, argv = argv[0], argv[1:]
		if len(argv) > 0 && argv[0] == "--" {
			argv = argv[1:]
		}
	}
	if len(argv) == 0 {
		return usageErr(stderr, "exec needs a command after the sandbox id: cove sandbox exec ID -- CMD ARGS...")
	}
	s, err := rt.Get(ctx, id)
	if err != nil {
		return err
	}
	req := sandbox.ExecRequest{Cmd: argv[0], Args: argv[1:], Dir: *dir, User: *user, Stdout: stdout, Stderr: stderr, Env: map[string]string{}}
	for _, kv := range envs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("-e %q: want KEY=VALUE", kv)
		}
		req.Env[k] = v
	}
	var st sandbox.ExitStatus
	if *tty {
		st, err = execTTY(ctx, s, req)
	} else {
		if *interactive {
			req.Stdin = os.Stdin
		}
		st, err = s.Exec(ctx, req)
	}
	if err != nil {
		return sandbox.WrapID(id, err)
	}
	switch {
	case st.OOM:
		fmt.Fprintf(stderr, "cove: the command was killed for using more memory than sandbox %s allows (--memory)\n", id)
	case st.Signal != "":
		fmt.Fprintf(stderr, "cove: the command was killed by signal %s\n", st.Signal)
	}
	if !st.Success() {
		code := st.Code
		if code <= 0 {
			code = 128 + 9
		}
		return clibase.ExitError{Code: code}
	}
	return nil
}

// plainTerm reports whether t is a terminal type worth passing on: set,
// not "dumb", and short plain characters (a terminfo name).
func plainTerm(t string) bool {
	return t != "" && t != "dumb" && len(t) <= 64 && strings.Trim(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.+-_") == ""
}

// execTTY runs a command on a PTY, with our terminal in raw mode and its
// size followed.
func execTTY(ctx context.Context, s sandbox.Session, req sandbox.ExecRequest) (sandbox.ExitStatus, error) {
	fd := int(os.Stdin.Fd())
	size := &sandbox.PTYSize{Cols: 80, Rows: 24}
	if term.IsTerminal(fd) {
		if w, h, err := term.GetSize(fd); err == nil {
			size = &sandbox.PTYSize{Cols: uint16(w), Rows: uint16(h)}
		}
		old, err := term.MakeRaw(fd)
		if err == nil {
			defer term.Restore(fd, old)
		}
	}
	req.PTY = size
	req.OpenStdin = true
	// Our terminal's type, as ssh sends it; without one the sandbox's
	// daemon gives xterm-256color.
	if t := os.Getenv("TERM"); req.Env["TERM"] == "" && plainTerm(t) {
		req.Env = maps.Clone(req.Env)
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env["TERM"] = t
	}
	req.Stderr = nil
	p, err := s.Start(ctx, req)
	if err != nil {
		return sandbox.ExitStatus{}, err
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	go func() {
		for range winch {
			if w, h, err := term.GetSize(fd); err == nil {
				p.Resize(ctx, sandbox.PTYSize{Cols: uint16(w), Rows: uint16(h)})
			}
		}
	}()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := os.Stdin.Read(buf)
			if n > 0 {
				if p.Write(ctx, buf[:n]) != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	st, err := p.Wait(ctx)
	if err != nil && ctx.Err() != nil {
		p.Signal(context.WithoutCancel(ctx), sandbox.SIGKILL)
	}
	return st, err
}

// splitRemote parses ID:PATH; ok is false for a local path.
func splitRemote(arg string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(arg, ":")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", "", false
	}
	return id, p, true
}

func sandboxCopy(ctx context.Context, rt sandbox.Runtime, args []string, stderr io.Writer) error {
	if len(args) != 2 {
		return usageErr(stderr, "cp takes a source and a destination, one of them ID:PATH")
	}
	srcID, srcPath, srcRemote := splitRemote(args[0])
	dstID, dstPath, dstRemote := splitRemote(args[1])
	switch {
	case srcRemote && !dstRemote:
		s, err := rt.Get(ctx, srcID)
		if err != nil {
			return err
		}
		return copyOut(ctx, s, srcPath, args[1], stderr)
	case !srcRemote && dstRemote:
		s, err := rt.Get(ctx, dstID)
		if err != nil {
			return err
		}
		return copyIn(ctx, s, args[0], dstPath, stderr)
	}
	return usageErr(stderr, "cp copies between this machine and a sandbox: exactly one side must be ID:PATH")
}

// copyIn copies a local file or folder to dst in the sandbox; into dst
// when dst is an existing directory, as cp does.
func copyIn(ctx context.Context, s sandbox.Session, src, dst string, stderr io.Writer) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	if dfi, err := s.Stat(ctx, dst); err == nil && dfi.Type == sandbox.TypeDir {
		dst = path.Join(dfi.Path, filepath.Base(src))
	}
	if !fi.IsDir() {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := s.WriteFile(ctx, dst, f, uint32(fi.Mode().Perm())); err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		fmt.Fprintf(stderr, "copied %s (%d bytes) to %s:%s\n", src, fi.Size(), s.ID(), dst)
		return nil
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarball.Write(ctx, pw, src)) }()
	if err := tarball.WriteDir(ctx, s, dst, pr); err != nil {
		pr.CloseWithError(err)
		return fmt.Errorf("cp: %w", err)
	}
	fmt.Fprintf(stderr, "copied folder %s to %s:%s\n", src, s.ID(), dst)
	return nil
}

// copyOut copies a sandbox file or folder to a local path.
func copyOut(ctx context.Context, s sandbox.Session, src, dst string, stderr io.Writer) error {
	fi, err := s.Stat(ctx, src)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	if lfi, err := os.Stat(dst); err == nil && lfi.IsDir() {
		dst = filepath.Join(dst, fi.Name)
	}
	if fi.Type != sandbox.TypeDir {
		rc, err := s.ReadFile(ctx, src)
		if err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		defer rc.Close()
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(fi.Mode&0o777)|0o600)
		if err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		n, err := io.Copy(f, rc)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		fmt.Fprintf(stderr, "copied %s:%s (%d bytes) to %s\n", s.ID(), src, n, dst)
		return nil
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarball.ReadDir(ctx, s, src, pw)) }()
	if err := tarball.Extract(ctx, pr, dst, tarball.ExtractOptions{}); err != nil {
		pr.CloseWithError(err)
		return fmt.Errorf("cp: %w", err)
	}
	fmt.Fprintf(stderr, "copied folder %s:%s to %s\n", s.ID(), src, dst)
	return nil
}

func sandboxSnapshot(ctx context.Context, rt sandbox.Runtime, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	clibase.SetUsage(fs, "Usage: cove sandbox snapshot ID -o FILE.tar\n\nSaves the sandbox's workspace as a tar.\n")
	out := fs.String("o", "", "file to write the tar to")
	if clibase.HelpAsked(args) {
		return clibase.ParseFlags(fs, []string{"-h"}, stdout, stderr)
	}
	if len(args) == 0 {
		return usageErr(stderr, "snapshot needs a sandbox id")
	}
	id := args[0]
	if err := clibase.ParseFlags(fs, args[1:], stdout, stderr); err != nil {
		return err
	}
	if *out == "" {
		return usageErr(stderr, "snapshot needs -o FILE.tar")
	}
	s, err := rt.Get(ctx, id)
	if err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	cw := &countWriter{w: f}
	err = s.SnapshotWorkspace(ctx, cw)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(*out)
		return err
	}
	fmt.Fprintf(stderr, "wrote %s (%d bytes)\n", *out, cw.n)
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func sandboxRemove(ctx context.Context, rt sandbox.Runtime, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rm", flag.ContinueOnError)
	clibase.SetUsage(fs, "Usage: cove sandbox rm [-f] ID...\n\nDeletes sandboxes and their disks.\n")
	force := fs.Bool("f", false, "stop running sandboxes first")
	if err := clibase.ParseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	return eachID(fs.Args(), func(id string) error {
		s, err := rt.Get(ctx, id)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State == sandbox.StateRunning && !*force {
			return fmt.Errorf("sandbox %s is running: stop it first (cove sandbox stop) or use rm -f: %w", id, sandbox.ErrState)
		}
		return rt.Delete(ctx, id)
	}, stdout, "deleted")
}

// eachID runs fn for every id, printing "<verb> ID" for each success and
// each failure's reason; it fails if any did.
func eachID(ids []string, fn func(string) error, stdout io.Writer, verb string) error {
	if len(ids) == 0 {
		return fmt.Errorf("no sandbox id given: %w", clibase.ErrUsage)
	}
	var errs []error
	for _, id := range ids {
		if err := fn(id); err != nil {
			errs = append(errs, sandbox.WrapID(id, err))
			continue
		}
		fmt.Fprintf(stdout, "%s %s\n", verb, id)
	}
	return errors.Join(errs...)
}

// execHelpAsked is helpAsked for `cove sandbox exec`: its flags may come
// before or after the sandbox id, but the first argument after the id
// that is not a flag starts the command, whose own --help is its own.
func execHelpAsked(args []string) bool {
	seenID := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return false
		case clibase.IsHelpFlag(a):
			return true
		case a == "-e" || a == "-w" || a == "-u":
			i++ // the flag's value
		case strings.HasPrefix(a, "-"):
		case !seenID:
			seenID = true
		default:
			return false
		}
	}
	return false
}

// sandboxHelp is the usage of `cove sandbox CMD` ("" when CMD has no
// page of its own: the sandbox usage is shown).
var sandboxHelp = map[string]string{
	"ls":     "Usage: cove sandbox ls\n\nLists the sandboxes: id, state (paused: stopped with its memory), tier (native or gvisor), template, age, and the time left before the TTL stops each.\n",
	"list":   "Usage: cove sandbox ls\n\nLists the sandboxes: id, state (paused: stopped with its memory), tier (native or gvisor), template, age, and the time left before the TTL stops each.\n",
	"cp":     "Usage: cove sandbox cp ID:PATH LOCAL\n       cove sandbox cp LOCAL ID:PATH\n\nCopies a file or folder between this machine and a sandbox; into PATH when it is a folder.\n",
	"stop":   "Usage: cove sandbox stop ID...\n\nStops sandboxes; their disk is kept (cove sandbox resume ID).\n",
	"resume": "Usage: cove sandbox resume ID...\n\nStarts stopped sandboxes again, with their disk.\n",
	"fork":   "Usage: cove sandbox fork [--count N] ID\n\nMakes N (default 1) new running sandboxes, each a copy of ID's disk and, of a running gvisor sandbox, of its processes and memory (checkpointed once); prints their ids, one a line.\n",
	"pause":  "Usage: cove sandbox pause [--keep-memory] ID...\n\nPauses running sandboxes. A gvisor sandbox keeps its processes and memory: cove sandbox resume brings them back where they were. A native sandbox cannot: it is stopped with its disk (its processes end), and pause says so; --keep-memory refuses that instead.\n",
	"drain":  "Usage: cove sandbox drain\n\nDeletes the sandboxes kept ready for COVE_POOL.\n",
}
