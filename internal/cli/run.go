package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/term"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/capabilities"
	"github.com/cove-sandbox/cove/agent/tool/mcp"
	"github.com/cove-sandbox/cove/internal/app"
	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/internal/cli/workdir"
	"github.com/cove-sandbox/cove/manifest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/tarball"
	"github.com/cove-sandbox/cove/trace"
)

const runUsage = `Usage: cove run [flags] "task"
       cove run --resume STATE.json [--approve-call ID|all] [--reject-call ID|all]

Runs an agent on a task in a sandbox made from a workspace: every command,
its output, the files it changed and the final answer are shown as they
happen; the changed workspace is copied to --out, or printed as a patch.

A call that needs your approval is asked y/N at the terminal. When cove
cannot ask (--json, or stdin is not a terminal) it saves the run to --state
and exits with code 3; --resume goes on with it, in the same sandbox, with
the flags it was started with. Ctrl-C stops the run, deletes its sandbox
and exits with code 130.

Flags:
`

// runOptions are cove run's flags.
type runOptions struct {
	workspace, manifest, model, baseURL, api, approve, out, stateFile, resume string
	template, memory, ttl, stateDir, instructions, prices, server, isolation  string
	jsonOut                                                                   bool
	cpus                                                                      float64
	maxTurns                                                                  int
	approveCalls, rejectCalls, mcpCmds, mcpURLs                               clibase.MultiFlag
}

// flags defines cove run's flags on fs, into o.
func (o *runOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.workspace, "workspace", "", "host directory copied into the sandbox's workspace (default: the current directory unless --manifest is given)")
	fs.StringVar(&o.manifest, "manifest", "", "manifest JSON file describing the workspace")
	fs.StringVar(&o.model, "model", envOr("COVE_MODEL", "gpt-5.1"), "model name ($COVE_MODEL)")
	fs.StringVar(&o.baseURL, "base-url", os.Getenv("OPENAI_BASE_URL"), "OpenAI-compatible server, e.g. http://localhost:11434/v1 for Ollama ($OPENAI_BASE_URL)")
	fs.StringVar(&o.api, "api", "", `"responses" or "chat" (default: responses for OpenAI, chat for --base-url servers)`)
	fs.StringVar(&o.approve, "approve", "risky", "which tool calls wait for your y/n: never, risky (deletes, installs, network, pushes, writes outside the workspace) or all")
	fs.StringVar(&o.out, "out", "", "copy the final workspace to this directory (default: print the changes as a patch)")
	fs.BoolVar(&o.jsonOut, "json", false, "print the run's events as JSON lines on stdout")
	fs.StringVar(&o.stateFile, "state", "", "where a run waiting for approval saves its state when it cannot ask (--json, or no terminal); never uploaded to the sandbox (default: a new file under Cove's state directory, in runs/)")
	fs.StringVar(&o.resume, "resume", "", "resume the run saved in this state file, with the flags it was started with unless given again")
	fs.Var(&o.approveCalls, "approve-call", "with --resume: approve this call id (or all); repeatable")
	fs.Var(&o.rejectCalls, "reject-call", "with --resume: reject this call id (or all); repeatable")
	fs.StringVar(&o.template, "template", "", "sandbox template (default host)")
	fs.StringVar(&o.isolation, "isolation", "", "the sandbox's tier: native (the default) or gvisor (gVisor's user-space kernel between the agent's commands and the host's)")
	fs.Float64Var(&o.cpus, "cpus", 0, "CPU quota in cores")
	fs.StringVar(&o.memory, "memory", "", "memory limit, e.g. 1G")
	fs.StringVar(&o.ttl, "ttl", "1h", "the sandbox stops this long after it starts")
	fs.IntVar(&o.maxTurns, "max-turns", agent.DefaultMaxTurns, "maximum model calls")
	fs.StringVar(&o.instructions, "instructions", "", "extra instructions for the agent")
	fs.StringVar(&o.prices, "prices", "", `JSON file of model prices in USD per 1M tokens: {"my-model": {"input": 1, "cached_input": 0.1, "output": 4}}`)
	fs.Var(&o.mcpCmds, "mcp", `MCP server over stdio, as "name=command args..."; repeatable`)
	fs.Var(&o.mcpURLs, "mcp-url", `MCP server over Streamable HTTP, as "name=URL"; repeatable`)
	fs.StringVar(&o.stateDir, "state-dir", "", "Cove's state directory")
	fs.StringVar(&o.server, "server", os.Getenv("COVE_SERVER"), "make the sandbox on this Cove server, with the API key in $COVE_API_KEY ($COVE_SERVER; default: this machine)")
}

// agentRun is one `cove run`: its flags, where it shows what happens,
// and what it runs on.
type agentRun struct {
	o      runOptions
	stdout io.Writer
	// safe is stdout with control characters made visible; show writes
	// to it (or to stdout itself with --json).
	safe *safeWriter
	show *renderer
	// st is the saved run being resumed (nil for a new run).
	st  *agent.RunState
	rt  sandbox.Runtime
	a   *agent.Agent
	cfg agent.RunConfig
	// kind is what rt is: isolated, unisolated or a server's.
	kind runtimes.Kind
	// original is the host workspace (absolute; "" for none), finalDir a
	// temporary copy of the workspace as the run left it ("" until the
	// run finishes).
	original, finalDir string
	// skip are the run's own state files inside original (relative):
	// never uploaded, left as they are at the end (runstate.go).
	skip []string
}

func runCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	r := &agentRun{stdout: stdout}
	o := &r.o
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), runUsage); fs.PrintDefaults() }
	o.flags(fs)
	if err := clibase.ParseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	usageErr := func(format string, args ...any) error {
		fmt.Fprintf(stderr, "cove run: "+format+"\n", args...)
		fs.Usage()
		return clibase.ErrUsage
	}
	task := strings.Join(fs.Args(), " ")
	switch {
	case o.resume == "" && strings.TrimSpace(task) == "":
		return usageErr("say what the agent should do, e.g. cove run \"fix the failing test\"")
	case o.resume != "" && task != "":
		return usageErr("--resume goes on with the saved run's task; give no new one")
	case o.resume == "" && len(o.approveCalls)+len(o.rejectCalls) > 0:
		return usageErr("--approve-call and --reject-call decide the calls of a saved run: use them with --resume")
	}
	// What the sandbox and the model produce reaches the terminal with
	// its control characters made visible (termsafe.go); JSON escapes
	// them itself.
	var shown io.Writer = stdout
	r.safe = newSafeWriter(stdout)
	if !o.jsonOut {
		shown = r.safe
		defer r.safe.Flush()
	}
	r.show = newRenderer(shown, o.jsonOut)
	if err := r.loadResume(given); err != nil {
		return err
	}
	policy, err := approvalPolicy(o.approve)
	if err != nil {
		return usageErr("%v", err)
	}
	shutdown, err := trace.Setup(ctx, "cove")
	if err != nil {
		return err
	}
	defer shutdown(context.WithoutCancel(ctx))
	if err := r.setup(policy, usageErr); err != nil {
		return err
	}
	if err := r.workspace(ctx); err != nil {
		return err
	}
	defer func() {
		if r.finalDir != "" {
			os.RemoveAll(r.finalDir)
		}
	}()
	if err := r.run(ctx, task, stdin); err != nil {
		return err
	}
	if o.resume != "" {
		os.Remove(o.resume) // done with; before the patch, which must not show it
	}
	return r.result()
}

// loadResume reads the saved run of --resume, if any: its calls are
// decided first, so a wrong id fails before anything starts, and the
// flags it ran with apply again unless given anew.
func (r *agentRun) loadResume(given map[string]bool) error {
	o := &r.o
	if o.resume == "" {
		return nil
	}
	b, err := os.ReadFile(o.resume)
	if err != nil {
		return fmt.Errorf("reading the run state: %w", err)
	}
	if r.st, err = agent.ParseRunState(b); err != nil {
		return fmt.Errorf("%s: %w", o.resume, err)
	}
	if err := decideFromFlags(r.st, o.approveCalls, o.rejectCalls); err != nil {
		return err
	}
	if err := o.restore(r.st.Meta[metaOptions], given); err != nil {
		return fmt.Errorf("%s: %w", o.resume, err)
	}
	if !given["state"] {
		o.stateFile = o.resume // a run that waits again saves over the file it came from
	}
	r.show.remember(r.st.Approvals)
	return nil
}

// setup makes the run's model, tools, runtime, sandbox spec and agent.
func (r *agentRun) setup(policy agent.ApprovalPolicy, usageErr func(string, ...any) error) error {
	o := &r.o
	ttl, err := clibase.ParseTTL(o.ttl)
	if err != nil {
		return err // says what --ttl takes
	}
	model, err := app.RunModel(o.model, o.baseURL, o.api)
	if err != nil {
		return err
	}
	var sources []agent.ToolSource
	servers, err := mcpServers(*o)
	if err != nil {
		return usageErr("%v", err)
	}
	if len(servers) > 0 {
		sources = append(sources, mcp.NewSource(servers...))
	}
	var prices map[string]agent.Price
	if o.prices != "" {
		b, err := os.ReadFile(o.prices)
		if err == nil {
			err = json.Unmarshal(b, &prices)
		}
		if err != nil {
			return fmt.Errorf("reading --prices %s: %v", o.prices, err)
		}
	}
	// The tier is checked before anything is made or uploaded.
	if probe := (sandbox.Spec{Isolation: o.isolation}); probe.Normalize() != nil {
		return fmt.Errorf("--isolation %q: want native (the default) or gvisor: %w", o.isolation, clibase.ErrUsage)
	}
	rt, kind, err := runtimes.AgentRuntime(o.stateDir, o.server)
	if err != nil {
		return err
	}
	r.rt = rt
	spec := sandbox.Spec{Template: o.template, TTL: ttl, Limits: sandbox.Limits{CPUs: o.cpus}, Isolation: o.isolation}
	if o.memory != "" {
		if spec.Limits.MemoryBytes, err = clibase.ParseSize(o.memory); err != nil {
			return fmt.Errorf("--memory %q: %v", o.memory, err)
		}
	}
	r.a = &agent.Agent{
		Name:         "cove",
		Instructions: defaultRunInstructions + o.instructions,
		Model:        model,
		ToolSources:  sources,
		Approval:     policy,
		Sandbox:      &agent.SandboxAgent{Capabilities: capabilities.Default()},
	}
	sc := &agent.SandboxRunConfig{Runtime: rt, Spec: spec}
	r.cfg = agent.RunConfig{MaxTurns: o.maxTurns, Sandbox: sc, OnEvent: r.show.event, Prices: prices}
	r.kind = kind
	return nil
}

// workspace sets up the run's workspace: a manifest, or a host directory
// uploaded as a tar, whose original content is kept to print the changes
// at the end; a resumed run says where it goes on. At the end the
// workspace as the run left it is copied out to r.finalDir.
func (r *agentRun) workspace(ctx context.Context) error {
	o, sc, show := &r.o, r.cfg.Sandbox, r.show
	if st := r.st; st != nil {
		r.original = st.Meta[metaWorkspace]
		r.skip = inWorkspace(r.original, o.stateFile, o.resume)
		if ss := st.Sandbox; ss != nil && ss.ID != "" {
			if _, err := r.rt.Get(ctx, ss.ID); err == nil {
				show.note("resuming in sandbox %s", ss.ID)
			} else if errors.Is(err, sandbox.ErrNotFound) {
				show.note("sandbox %s is gone; recreating it from the workspace saved in %s", ss.ID, o.resume)
			}
		}
	} else {
		if o.manifest != "" {
			b, err := os.ReadFile(o.manifest)
			if err != nil {
				return fmt.Errorf("reading the manifest: %w", err)
			}
			m, err := manifest.Parse(b)
			if err != nil {
				return fmt.Errorf("%s: %w", o.manifest, err)
			}
			sc.Manifest = m
			sc.ApplyOptions.BaseDir = filepath.Dir(o.manifest)
		}
		if o.workspace == "" && o.manifest == "" {
			o.workspace = "."
		}
		if o.workspace != "" {
			original, err := filepath.Abs(o.workspace)
			if err != nil {
				return err
			}
			if fi, err := os.Stat(original); err != nil || !fi.IsDir() {
				return fmt.Errorf("--workspace %s: not a directory", o.workspace)
			}
			r.original = original
			r.skip = inWorkspace(original, o.stateFile)
			sc.Prepare = func(ctx context.Context, s sandbox.Session) error {
				show.note("uploading %s to sandbox %s", original, s.ID())
				return uploadDir(ctx, s, original, r.skip...)
			}
		}
	}
	sc.OnFinish = func(ctx context.Context, s sandbox.Session) error {
		dir, err := os.MkdirTemp("", "cove-run-out-")
		if err != nil {
			return err
		}
		r.finalDir = dir
		var buf bytes.Buffer
		if err := s.SnapshotWorkspace(ctx, &buf); err != nil {
			return fmt.Errorf("copying the workspace out: %w", err)
		}
		return tarball.Extract(ctx, &buf, dir, tarball.ExtractOptions{})
	}
	if r.kind == runtimes.Unisolated {
		show.note("no isolation: not root, so commands run as plain host processes (hostproc runtime)")
	}
	return nil
}

// run runs (or resumes) the agent; calls that wait for approval are
// asked at the terminal, or, when cove cannot ask, the run is saved and
// cove exits with code 3.
func (r *agentRun) run(ctx context.Context, task string, stdin io.Reader) error {
	o, show := &r.o, r.show
	interactive := !o.jsonOut && isTerminal(stdin)
	answers := bufio.NewReader(stdin)
	runner := &agent.Runner{}
	var res *agent.Result
	var err error
	if r.st != nil {
		res, err = runner.Resume(ctx, r.a, r.st, r.cfg)
	} else {
		res, err = runner.Run(ctx, r.a, task, r.cfg)
	}
	for err == nil && len(res.Interruptions) > 0 {
		if !interactive {
			return r.save(res)
		}
		r.safe.Flush()
		if err := askApprovals(ctx, res.State, answers, r.stdout); err != nil {
			// Nobody will resume this run: the sandbox it kept for the
			// answers goes.
			if ss := res.State.Sandbox; ss != nil && ss.Owned {
				_ = r.rt.Delete(context.WithoutCancel(ctx), ss.ID)
			}
			if ctx.Err() != nil {
				show.note("stopped; the sandbox was torn down")
				return clibase.ExitError{Code: 130}
			}
			return err
		}
		res, err = runner.Resume(ctx, r.a, res.State, r.cfg)
	}
	if err != nil && ctx.Err() != nil {
		// Ctrl-C: the Runner has torn the sandbox down; say so rather
		// than print "context canceled".
		show.note("stopped; the sandbox was torn down")
		return clibase.ExitError{Code: 130}
	}
	return err
}

// save saves a run that waits for approval to --state, for --resume,
// and says how to go on: exit code 3.
func (r *agentRun) save(res *agent.Result) error {
	o := &r.o
	if res.State.Meta == nil {
		res.State.Meta = map[string]string{}
	}
	if r.original != "" {
		res.State.Meta[metaWorkspace] = r.original
	}
	var err error
	if res.State.Meta[metaOptions], err = o.saved(); err != nil {
		return err
	}
	if o.stateFile == "" {
		if o.stateFile, err = newStateFile(o.stateDir); err != nil {
			return fmt.Errorf("saving the run state: %w", err)
		}
	}
	b, _ := json.Marshal(res.State)
	if werr := os.WriteFile(o.stateFile, b, 0o600); werr != nil {
		return fmt.Errorf("saving the run state: %w", werr)
	}
	r.show.note("waiting for approval of %d call(s); state saved to %s\n  resume: cove run --resume %s --approve-call all   (or --approve-call ID / --reject-call ID)", len(res.Interruptions), o.stateFile, o.stateFile)
	return clibase.ExitError{Code: 3}
}

// result hands over the workspace the run left: copied to --out, or
// printed as a patch against the original.
func (r *agentRun) result() error {
	o, show := &r.o, r.show
	if r.finalDir == "" {
		return nil
	}
	if err := keepSkipped(r.original, r.finalDir, r.skip); err != nil {
		return fmt.Errorf("keeping the run's state file: %w", err)
	}
	if o.out != "" {
		if err := workdir.Sync(r.finalDir, o.out, r.original); err != nil {
			return fmt.Errorf("copying the workspace to %s: %w", o.out, err)
		}
		show.note("workspace copied to %s", o.out)
		return nil
	}
	if r.original == "" || o.jsonOut {
		return nil
	}
	patch, links, err := workdir.Diff(r.original, r.finalDir)
	if err != nil {
		return err
	}
	for _, l := range links {
		show.note("not in the patch: the link %s (--out copies the workspace with its links)", oneLine(l))
	}
	if patch == "" && len(links) == 0 {
		show.note("no files changed")
		return nil
	}
	r.safe.Flush()
	if f, ok := r.stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		// Redirected, the patch stays exact for git apply.
		patch = termSafe(patch)
	}
	fmt.Fprint(r.stdout, patch)
	return nil
}

const defaultRunInstructions = "You are a careful software agent. Inspect the workspace before answering, make the changes the task needs, run the project's tests when there are any, and end with a short summary of what you did and what you found.\n"

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func approvalPolicy(mode string) (agent.ApprovalPolicy, error) {
	switch mode {
	case "never":
		return nil, nil
	case "risky":
		return agent.ApproveRisky, nil
	case "all":
		return agent.ApproveAll, nil
	}
	return nil, fmt.Errorf("--approve %q: want never, risky or all", mode)
}

func mcpServers(o runOptions) ([]mcp.Server, error) {
	var out []mcp.Server
	for _, v := range o.mcpCmds {
		name, cmd, ok := strings.Cut(v, "=")
		f := strings.Fields(cmd)
		if !ok || name == "" || len(f) == 0 {
			return nil, fmt.Errorf("--mcp %q: want name=command args", v)
		}
		out = append(out, mcp.Server{Name: name, Command: f[0], Args: f[1:]})
	}
	for _, v := range o.mcpURLs {
		name, u, ok := strings.Cut(v, "=")
		if !ok || name == "" || u == "" {
			return nil, fmt.Errorf("--mcp-url %q: want name=URL", v)
		}
		out = append(out, mcp.Server{Name: name, URL: u})
	}
	return out, nil
}

// metaWorkspace is the RunState.Meta key of the host workspace directory,
// so a run resumed in another process prints its patch against it.
const metaWorkspace = "cove.workspace"

// metaOptions is the RunState.Meta key of the flags a resume keeps.
const metaOptions = "cove.options"

// savedOptions are the flags of a run that its resume keeps unless they
// are given again, so `cove run --resume FILE --approve-call all` goes on
// with the same model and server, approval policy, tools, sandbox store
// (or Cove server) and --out. Paths are absolute: the resume may run
// elsewhere. The API keys are never saved; they come from the
// environment each time.
type savedOptions struct {
	Model        string   `json:"model,omitempty"`
	BaseURL      string   `json:"base_url,omitempty"`
	API          string   `json:"api,omitempty"`
	Approve      string   `json:"approve,omitempty"`
	Out          string   `json:"out,omitempty"`
	StateDir     string   `json:"state_dir,omitempty"`
	Server       string   `json:"server,omitempty"`
	MaxTurns     int      `json:"max_turns,omitempty"`
	Instructions string   `json:"instructions,omitempty"`
	Prices       string   `json:"prices,omitempty"`
	MCP          []string `json:"mcp,omitempty"`
	MCPURL       []string `json:"mcp_url,omitempty"`
}

// saved is the Meta value of o's savedOptions.
func (o *runOptions) saved() (string, error) {
	s := savedOptions{Model: o.model, BaseURL: o.baseURL, API: o.api, Approve: o.approve, Server: o.server,
		MaxTurns: o.maxTurns, Instructions: o.instructions, MCP: o.mcpCmds, MCPURL: o.mcpURLs}
	var err error
	abs := func(p string) string {
		if p == "" || err != nil {
			return p
		}
		p, err = filepath.Abs(p)
		return p
	}
	s.Out, s.Prices = abs(o.out), abs(o.prices)
	// The store the sandbox is in, wherever COVE_HOME points next time.
	s.StateDir = abs(runtimes.DataDir(o.stateDir))
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(s)
	return string(b), err
}

// restore sets the flags not given on this command line from a saved run's
// Meta value ("" for a state saved without one).
func (o *runOptions) restore(meta string, given map[string]bool) error {
	if meta == "" {
		return nil
	}
	var s savedOptions
	if err := json.Unmarshal([]byte(meta), &s); err != nil {
		return fmt.Errorf("reading the saved flags: %v", err)
	}
	set := func(name string, dst *string, v string) {
		if !given[name] && v != "" {
			*dst = v
		}
	}
	set("model", &o.model, s.Model)
	set("base-url", &o.baseURL, s.BaseURL)
	set("api", &o.api, s.API)
	set("approve", &o.approve, s.Approve)
	set("out", &o.out, s.Out)
	set("state-dir", &o.stateDir, s.StateDir)
	set("server", &o.server, s.Server)
	set("instructions", &o.instructions, s.Instructions)
	set("prices", &o.prices, s.Prices)
	if !given["max-turns"] && s.MaxTurns > 0 {
		o.maxTurns = s.MaxTurns
	}
	if !given["mcp"] && !given["mcp-url"] {
		o.mcpCmds, o.mcpURLs = s.MCP, s.MCPURL
	}
	return nil
}

func decideFromFlags(st *agent.RunState, approve, reject []string) error {
	for _, id := range approve {
		if id == "all" {
			st.DecideAll(agent.Approved, "")
		} else if err := st.Approve(id); err != nil {
			return err
		}
	}
	for _, id := range reject {
		if id == "all" {
			st.DecideAll(agent.Rejected, "")
		} else if err := st.Reject(id, ""); err != nil {
			return err
		}
	}
	if und := st.Undecided(); len(und) > 0 {
		var ids []string
		for _, u := range und {
			ids = append(ids, u.CallID+" ("+u.Tool+": "+u.Reason+")")
		}
		return fmt.Errorf("decide every pending call with --approve-call ID|all or --reject-call ID|all: %s", strings.Join(ids, ", "))
	}
	return nil
}

// askApprovals asks y/N at the terminal for each call that waits. Each
// question comes after a terminal reset and on one line of its own, with
// the call's text made safe: whatever the sandbox or the model printed
// before, or put in the command, the question the user reads is the one
// asked.
func askApprovals(ctx context.Context, st *agent.RunState, in *bufio.Reader, stdout io.Writer) error {
	for _, ap := range st.Undecided() {
		fmt.Fprintf(stdout, "%s\n? approve %s (%s)? [y/N] ", termReset, oneLine(summarizeCall(ap.Tool, ap.Arguments, ap.CallView)), oneLine(ap.Reason))
		line, err := readLine(ctx, in)
		if err != nil && line == "" {
			return fmt.Errorf("reading your answer: %w", err)
		}
		if a := strings.ToLower(strings.TrimSpace(line)); a == "y" || a == "yes" {
			_ = st.Approve(ap.CallID)
		} else {
			_ = st.Reject(ap.CallID, "")
		}
	}
	return nil
}

// readLine reads a line from in, or gives up when ctx ends: Ctrl-C at a
// prompt must not wait for Enter. The read itself cannot be cancelled and
// goes on in the background; nothing reads in after that.
func readLine(ctx context.Context, in *bufio.Reader) (string, error) {
	type line struct {
		s   string
		err error
	}
	ch := make(chan line, 1)
	go func() {
		s, err := in.ReadString('\n')
		ch <- line{s, err}
	}()
	select {
	case l := <-ch:
		return l.s, l.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// uploadDir copies a host directory into the workspace as one tar
// stream, without the files named in skip (relative, slash-separated).
func uploadDir(ctx context.Context, s sandbox.Session, dir string, skip ...string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTarSkipping(ctx, pw, dir, skip)) }()
	err := s.RestoreWorkspace(ctx, pr)
	pr.CloseWithError(err)
	return err
}
