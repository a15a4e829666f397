package manifest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
)

// publicOnly is a CheckAddr as a server sets it: loopback, private,
// link-local (cloud metadata), multicast and unspecified addresses are
// refused.
func publicOnly(host string, ap netip.AddrPort) error {
	a := ap.Addr()
	if !a.IsGlobalUnicast() || a.IsPrivate() {
		return fmt.Errorf("%s resolves to %s, which is not a public address", host, a)
	}
	return nil
}

// testResolver answers for made-up names and fails for the rest.
func testResolver(names map[string][]string) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		var out []netip.Addr
		for _, s := range names[host] {
			out = append(out, netip.MustParseAddr(s))
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("lookup %s on 10.0.0.53:53: no such host", host)
		}
		return out, nil
	}
}

// fakeGit is a git that records that it ran (its arguments, then its
// environment) in log and fails.
func fakeGit(t *testing.T) (git, log string) {
	t.Helper()
	dir := t.TempDir()
	log = filepath.Join(dir, "git.log")
	git = filepath.Join(dir, "git")
	script := "#!/bin/sh\nfor a in \"$@\"; do printf 'arg %s\\n' \"$a\" >> " + log + "; done\nenv | sed 's/^/env /' >> " + log + "\necho 'fatal: not really git' >&2\nexit 128\n"
	if err := os.WriteFile(git, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return git, log
}

// TestGitPolicyRefusesHostileURLs: under a server's policy (https to
// public addresses only) every way of pointing a git_repo at the host's
// own disk, at a command-running transport or at a private address is
// refused as invalid input before git runs.
func TestGitPolicyRefusesHostileURLs(t *testing.T) {
	r := newGitRepo(t)
	git, log := fakeGit(t)
	pol := GitPolicy{
		Schemes:   []string{"https"},
		CheckAddr: publicOnly,
		Resolve: testResolver(map[string][]string{
			"rebind.example": {"203.0.113.9", "127.0.0.1"},
			"public.example": {"203.0.113.9"},
		}),
	}
	tests := []struct {
		name  string
		entry GitRepo
		want  string
	}{
		{"URL Go cannot parse", GitRepo{Repo: "file://%zz" + r.bare, Ref: "v1"}, "not a valid URL"},
		{"host path", GitRepo{Repo: r.bare, Ref: "v1"}, "a path on the host is not allowed here; clone from https://"},
		{"file URL", GitRepo{Repo: "file://" + r.bare, Ref: "v1"}, "a path on the host is not allowed here"},
		{"file URL as host", GitRepo{Host: "file://" + filepath.Dir(r.bare), Repo: "bare.git", Ref: "v1"}, "a path on the host is not allowed here"},
		{"ext transport", GitRepo{Repo: "ext::sh -c touch% /tmp/pwned://x", Ref: "v1"}, "transport helpers"},
		{"ext transport in the repo name", GitRepo{Repo: "ext::sh -c touch% /tmp/pwned", Ref: "v1"}, "not a valid URL"},
		{"fd transport", GitRepo{Repo: "fd::17://x", Ref: "v1"}, "transport helpers"},
		{"option as repo", GitRepo{Repo: "-uhttps://public.example/x", Ref: "v1"}, `must not start with "-"`},
		{"option as host", GitRepo{Host: "--upload-pack=touch /tmp/pwned", Repo: "o/r", Ref: "v1"}, `must not start with "-"`},
		{"scp-like", GitRepo{Repo: "git@public.example:o/r.git://", Ref: "v1"}, "transport helpers"},
		{"ssh", GitRepo{Repo: "ssh://git@public.example/o/r.git", Ref: "v1"}, "ssh:// is not allowed here"},
		{"git protocol to localhost", GitRepo{Repo: "git://localhost/r.git", Ref: "v1"}, "git:// is not allowed here"},
		{"http to loopback", GitRepo{Repo: "http://127.0.0.1/r.git", Ref: "v1"}, "http:// is not allowed here"},
		{"https to IPv6 loopback", GitRepo{Repo: "https://[::1]/r.git", Ref: "v1"}, "not a public address"},
		{"https to IPv4-mapped loopback", GitRepo{Repo: "https://[::ffff:127.0.0.1]/r.git", Ref: "v1"}, "127.0.0.1, which is not a public address"},
		{"cloud metadata", GitRepo{Repo: "https://169.254.169.254/latest/meta-data", Ref: "v1"}, "not a public address"},
		{"private range", GitRepo{Host: "10.1.2.3", Repo: "o/r", Ref: "v1"}, "not a public address"},
		{"name that resolves to loopback", GitRepo{Repo: "https://rebind.example/o/r.git", Ref: "v1"}, "127.0.0.1, which is not a public address"},
		{"unknown name", GitRepo{Repo: "https://nowhere.example/o/r.git", Ref: "v1"}, "could not be resolved"},
		{"credentials", GitRepo{Repo: "https://user:token@public.example/o/r.git", Ref: "v1"}, "credentials in the URL"},
		{"backslash authority", GitRepo{Repo: `https://public.example\@127.0.0.1/o/r.git`, Ref: "v1"}, "not a valid URL"},
		{"bad port", GitRepo{Repo: "https://public.example:0/o/r.git", Ref: "v1"}, "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeSession()
			m := &Manifest{Entries: map[string]Entry{"repo": tt.entry}}
			err := Apply(context.Background(), m, s, ApplyOptions{GitCommand: git, Git: pol, BaseDir: t.TempDir()})
			if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Apply: got error %v, want one wrapping ErrInvalid containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "10.0.0.53") {
				t.Errorf("the error names the resolver: %v", err)
			}
			if _, err := os.Stat(log); err == nil {
				b, _ := os.ReadFile(log)
				os.Remove(log)
				t.Fatalf("git ran for a refused URL:\n%s", b)
			}
			if got := s.files("/workspace/repo"); len(got) != 0 {
				t.Errorf("sandbox files: got %v, want none", got)
			}
		})
	}
	// The system resolver, too: localhost is loopback.
	s := newFakeSession()
	m := &Manifest{Entries: map[string]Entry{"repo": GitRepo{Repo: "https://localhost/o/r.git", Ref: "v1"}}}
	err := Apply(context.Background(), m, s, ApplyOptions{GitCommand: git, Git: GitPolicy{Schemes: []string{"https"}, CheckAddr: publicOnly}})
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "not a public address") {
		t.Errorf("https://localhost: got %v, want it refused as not public", err)
	}
}

// TestGitPolicyPinsAndIsolates: a clone that passes the policy runs git
// pinned to the addresses that were checked, with redirects off, and in
// an environment that holds nothing of the host's: no configuration,
// credentials, proxies or GIT_* variables.
func TestGitPolicyPinsAndIsolates(t *testing.T) {
	git, log := fakeGit(t)
	t.Setenv("COVE_TEST_SECRET", "hunter2")
	t.Setenv("HTTPS_PROXY", "http://proxy.internal:3128")
	t.Setenv("GIT_CONFIG_PARAMETERS", "'url.https://evil.example/.insteadof'='https://public.example/'")
	t.Setenv("GIT_ASKPASS", "/usr/bin/steal-password")
	pol := GitPolicy{
		Schemes:   []string{"https"},
		CheckAddr: publicOnly,
		Resolve:   testResolver(map[string][]string{"public.example": {"203.0.113.9", "2001:db8::9"}}),
	}
	s := newFakeSession()
	m := &Manifest{Entries: map[string]Entry{"repo": GitRepo{Host: "public.example:8443", Repo: "o/r", Ref: "main"}}}
	err := Apply(context.Background(), m, s, ApplyOptions{GitCommand: git, Git: pol})
	if err == nil || !strings.Contains(err.Error(), "not really git") {
		t.Fatalf("Apply: got %v, want the fake git's failure", err)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("git did not run: %v", err)
	}
	var args, env []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if a, ok := strings.CutPrefix(l, "arg "); ok {
			args = append(args, a)
		} else if e, ok := strings.CutPrefix(l, "env "); ok {
			env = append(env, e)
		}
	}
	for _, want := range []string{
		"http.curloptResolve=public.example:8443:203.0.113.9,[2001:db8::9]",
		"http.followRedirects=false",
		"credential.helper=",
		"protocol.file.allow=never",
		"https://public.example:8443/o/r.git",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("git's arguments %q lack %q", args, want)
		}
	}
	for _, want := range []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "GIT_ALLOW_PROTOCOL=https"} {
		if !slices.Contains(env, want) {
			t.Errorf("git's environment %q lacks %q", env, want)
		}
	}
	for _, e := range env {
		name, val, _ := strings.Cut(e, "=")
		switch {
		case strings.Contains(e, "hunter2"), strings.Contains(strings.ToLower(name), "proxy"), name == "GIT_CONFIG_PARAMETERS":
			t.Errorf("the host's %s reached git", name)
		case name == "HOME" && val == os.Getenv("HOME"):
			t.Errorf("git ran with the host's HOME %s", val)
		}
	}
}

// TestGitIgnoresHostConfig: the host's own git configuration (here a
// global one that rewrites every URL) does not reach a clone, on a
// user's own machine either: a local repository clones as named.
func TestGitIgnoresHostConfig(t *testing.T) {
	r := newGitRepo(t)
	cfg := filepath.Join(t.TempDir(), "gitconfig")
	rule := fmt.Sprintf("[url \"%s\"]\n\tinsteadOf = %s\n", "/nonexistent/", filepath.Dir(r.bare)+"/")
	if err := os.WriteFile(cfg, []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GIT_CONFIG_GLOBAL", cfg)
	t.Setenv("GIT_DIR", "/nonexistent/.git")
	s := newFakeSession()
	m := &Manifest{Entries: map[string]Entry{"repo": GitRepo{Repo: r.bare, Ref: "v1", Subpath: "docs"}}}
	if err := Apply(context.Background(), m, s, ApplyOptions{}); err != nil {
		t.Fatalf("Apply with a hostile global git config: %v", err)
	}
	if got := s.files("/workspace/repo")["/workspace/repo/guide.md"]; got != "0644 v1" {
		t.Errorf("guide.md = %q, want the repository's v1", got)
	}
}
