package harden

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if name := os.Getenv(envProbe); name != "" {
		os.Exit(probeMain(name))
	}
	os.Exit(m.Run())
}

// features are the kernel's, as Apply will find them.
type features struct {
	seccomp  bool
	landlock int // ABI version Apply uses, 0 when it uses none
}

func kernelFeatures() features {
	f := features{seccomp: seccompMissing() == ""}
	if abi, err := ll.LandlockGetABIVersion(); err == nil && abi >= 2 {
		f.landlock = abi
	}
	return f
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: Apply drops capabilities that only a privileged process holds")
	}
}

// needs skips t when the kernel lacks what a probe's expected outcome
// depends on.
func (f features) needs(t *testing.T, what string) {
	t.Helper()
	switch {
	case what == "seccomp" && !f.seccomp:
		t.Skip("the kernel cannot take the seccomp filter: " + seccompMissing())
	case what == "landlock" && f.landlock == 0:
		t.Skip("the kernel has no Landlock of ABI 2 or later")
	}
}

type childResult struct {
	report  Report
	outcome string
}

// runProbe re-executes the test binary (or bin, when given) as a child
// that applies the hardening and runs probe, and returns what it printed.
func runProbe(t *testing.T, bin, probe string, env ...string) childResult {
	t.Helper()
	if bin == "" {
		bin = os.Args[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	// GORACE: a race-enabled child would otherwise sleep a second at exit.
	cmd.Env = append(append(os.Environ(), envProbe+"="+probe, "GORACE=atexit_sleep_ms=0"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe %s: %v\n%s", probe, err, out)
	}
	var res childResult
	var sawReport, sawOutcome bool
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "report: "); ok {
			if err := json.Unmarshal([]byte(v), &res.report); err != nil {
				t.Fatalf("probe %s: report %q: %v", probe, v, err)
			}
			sawReport = true
		}
		if v, ok := strings.CutPrefix(line, "outcome: "); ok {
			res.outcome = v
			sawOutcome = true
		}
	}
	if !sawReport || !sawOutcome {
		t.Fatalf("probe %s printed no report or outcome:\n%s", probe, out)
	}
	return res
}

// TestProbes applies the default hardening in a child, makes one
// forbidden (or allowed) call there, and asserts its exact outcome.
func TestProbes(t *testing.T) {
	requireRoot(t)
	k := kernelFeatures()
	tests := []struct {
		probe string
		want  string
		needs string // "seccomp" or "landlock": the layer the outcome depends on
	}{
		{"mount", "EPERM", "seccomp"},
		{"umount2", "EPERM", "seccomp"},
		{"pivot_root", "EPERM", "seccomp"},
		{"chroot", "EPERM", "seccomp"},
		{"fsopen", "EPERM", "seccomp"},
		{"open_tree", "EPERM", "seccomp"},
		{"unshare_newuser", "EPERM", "seccomp"},
		{"unshare_newnet", "EPERM", "seccomp"},
		{"unshare_files", "ok", ""},
		{"clone_newuser", "EPERM", "seccomp"},
		{"clone_newns", "EPERM", "seccomp"},
		{"clone_newpid", "EPERM", "seccomp"},
		{"clone3", "ENOSYS", "seccomp"},
		{"clone3_newuser", "ENOSYS", "seccomp"},
		{"setns", "EPERM", "seccomp"},
		{"keyctl", "EPERM", "seccomp"},
		{"add_key", "EPERM", "seccomp"},
		{"request_key", "EPERM", "seccomp"},
		{"bpf", "EPERM", "seccomp"},
		{"perf_event_open", "EPERM", "seccomp"},
		{"userfaultfd", "EPERM", "seccomp"},
		{"io_uring_setup", "ENOSYS", "seccomp"},
		{"init_module", "EPERM", "seccomp"},
		{"finit_module", "EPERM", "seccomp"},
		{"delete_module", "EPERM", "seccomp"},
		{"kexec_load", "EPERM", "seccomp"},
		{"reboot", "EPERM", "seccomp"},
		{"swapon", "EPERM", "seccomp"},
		{"syslog", "EPERM", "seccomp"},
		{"settimeofday", "EPERM", "seccomp"},
		{"clock_settime", "EPERM", "seccomp"},
		{"adjtimex", "EPERM", "seccomp"},
		{"name_to_handle_at", "ENOSYS", "seccomp"},
		{"open_by_handle_at", "EPERM", "seccomp"},
		{"personality_unsafe", "EPERM", "seccomp"},
		{"personality_query", "ok", ""},
		{"ptrace_parent", "EPERM", ""},
		{"ptrace_child", "ok", ""},
		{"read_file", "ok", ""},
		{"dev_null", "ok", ""},
		{"write_dir", "ok", ""}, // a temporary directory, beneath /tmp
		{"rename_dir", "ok", ""},
		{"write_proc", "EACCES", "landlock"},
		{"mkdir_root", "EACCES", "landlock"},
	}
	// Without Landlock's TSYNC, threads sit in sibling domains, and
	// Landlock refuses ptrace from one into another.
	ptraceSibling := "ok"
	if k.landlock > 0 && k.landlock < 8 {
		ptraceSibling = "EPERM"
	}
	tests = append(tests, []struct{ probe, want, needs string }{
		{"ptrace_sibling", ptraceSibling, ""},
		{"kill_sibling", "ok", ""},
	}...)
	if runtime.GOARCH == "amd64" {
		tests = append(tests, []struct{ probe, want, needs string }{
			{"int80_getpid", int80Refused(), "seccomp"},
			{"x32_getpid", "ENOSYS", ""},
			{"iopl", "EPERM", "seccomp"},
			{"ioperm", "EPERM", "seccomp"},
		}...)
	}
	for _, tt := range tests {
		t.Run(tt.probe, func(t *testing.T) {
			t.Parallel()
			k.needs(t, tt.needs)
			got := runProbe(t, "", tt.probe, envDir+"="+t.TempDir()).outcome
			if got != tt.want {
				t.Errorf("%s after Apply: got %s, want %s", tt.probe, got, tt.want)
			}
		})
	}
}

// TestReport checks what Apply says it did against the kernel's features.
func TestReport(t *testing.T) {
	requireRoot(t)
	k := kernelFeatures()
	got := runProbe(t, "", "read_file").report
	want := Report{
		Seccomp:    k.seccomp,
		Landlock:   k.landlock,
		NoNewPrivs: true,
		CapsKept:   DefaultKeepCaps(),
	}
	if !k.seccomp {
		want.Skipped = append(want.Skipped, seccompMissing())
	}
	if k.landlock == 0 {
		// The exact sentence depends on the ABI; compare its prefix only.
		for i, s := range got.Skipped {
			if strings.HasPrefix(s, "landlock: ") && !strings.Contains(s, "writable path") {
				want.Skipped = append(want.Skipped, got.Skipped[i])
			}
		}
	} else {
		if k.landlock < 8 {
			want.Skipped = append(want.Skipped, noTSyncNote(k.landlock))
		}
		writable, err := DefaultWritable()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range writable {
			if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
				want.Skipped = append(want.Skipped, fmt.Sprintf("landlock: writable path %s does not exist", p))
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
}

// procStatus reads one field of this process's /proc status.
func procStatus(t *testing.T, field string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return ""
}

func hexField(t *testing.T, field string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(procStatus(t, field), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// wantStatus is what the child's /proc status must show after the default
// Apply, given what this (unhardened) process holds.
func wantStatus(t *testing.T, k features) string {
	keep, err := capMask(DefaultKeepCaps())
	if err != nil {
		t.Fatal(err)
	}
	prm := keep & hexField(t, "CapPrm")
	bnd := keep & hexField(t, "CapBnd")
	mode, filters := procStatus(t, "Seccomp"), procStatus(t, "Seccomp_filters")
	if k.seccomp {
		n, _ := strconv.Atoi(filters)
		mode, filters = "2", strconv.Itoa(n+1)
	}
	return fmt.Sprintf("CapInh=%016x CapPrm=%016x CapEff=%016x CapBnd=%016x CapAmb=%016x NoNewPrivs=1 Seccomp=%s Seccomp_filters=%s",
		0, prm, prm, bnd, 0, mode, filters)
}

// TestStatus checks the capability sets, no_new_privs and seccomp mode
// the kernel shows for the hardened process: CAP_SYS_ADMIN and the other
// dropped capabilities are in none of the sets.
func TestStatus(t *testing.T) {
	requireRoot(t)
	k := kernelFeatures()
	want := wantStatus(t, k)
	got := runProbe(t, "", "status").outcome
	if got != want {
		t.Errorf("status after Apply:\ngot  %s\nwant %s", got, want)
	}
	// The point of it all, spelled out.
	for _, f := range strings.Fields(got) {
		k, v, _ := strings.Cut(f, "=")
		if !strings.HasPrefix(k, "Cap") {
			continue
		}
		if m, err := strconv.ParseUint(v, 16, 64); err != nil || m&(1<<unix.CAP_SYS_ADMIN) != 0 {
			t.Errorf("%s=%s after Apply: want CAP_SYS_ADMIN absent", k, v)
		}
	}
}

// TestAllThreads checks that every thread carries the hardening,
// including threads that existed before Apply.
func TestAllThreads(t *testing.T) {
	requireRoot(t)
	k := kernelFeatures()
	want := "threads alike; pinned threads write comm: ok"
	if k.landlock > 0 {
		want = "threads alike; pinned threads write comm: EACCES"
	}
	if got := runProbe(t, "", "threads").outcome; got != want {
		t.Errorf("threads after Apply: got %q, want %q", got, want)
	}
}

// TestWithoutCgo runs the thread and status probes in a test binary built
// with CGO_ENABLED=0, where psx uses syscall.AllThreadsSyscall instead of
// its C code (go test -race always links cgo).
func TestWithoutCgo(t *testing.T) {
	requireRoot(t)
	if testing.Short() {
		t.Skip("builds a second test binary")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build a CGO_ENABLED=0 test binary")
	}
	bin := filepath.Join(t.TempDir(), "harden.test")
	build := exec.Command(gobin, "test", "-c", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building without cgo: %v\n%s", err, out)
	}
	k := kernelFeatures()
	if got, want := runProbe(t, bin, "status").outcome, wantStatus(t, k); got != want {
		t.Errorf("status without cgo:\ngot  %s\nwant %s", got, want)
	}
	want := "threads alike; pinned threads write comm: ok"
	if k.landlock > 0 {
		want = "threads alike; pinned threads write comm: EACCES"
	}
	if got := runProbe(t, bin, "threads").outcome; got != want {
		t.Errorf("threads without cgo: got %q, want %q", got, want)
	}
}

// TestWritable applies a narrow Options.Writable: writes beneath it work,
// writes elsewhere get EACCES, reads work everywhere.
func TestWritable(t *testing.T) {
	requireRoot(t)
	kernelFeatures().needs(t, "landlock")
	inside, outside := t.TempDir(), t.TempDir()
	tests := []struct {
		probe, dir, want string
	}{
		{"write_dir", inside, "ok"},
		{"rename_dir", inside, "ok"},
		{"write_dir", outside, "EACCES"},
		{"read_file", outside, "ok"},
		{"dev_null", outside, "EACCES"}, // not in this narrow list
	}
	for _, tt := range tests {
		name := tt.probe + " " + map[bool]string{true: "inside", false: "outside"}[tt.dir == inside]
		t.Run(name, func(t *testing.T) {
			got := runProbe(t, "", tt.probe, envDir+"="+tt.dir, envWritable+"="+inside).outcome
			if got != tt.want {
				t.Errorf("%s with Writable=[%s]: got %s, want %s", name, inside, got, tt.want)
			}
		})
	}
}

// userDir returns a temporary directory that uid 1000 can reach, with the
// given mode.
func userDir(t *testing.T, mode os.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	// t.TempDir makes its directories 0700; uid 1000 must pass through.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSetuidBinary: with no_new_privs, a setuid-root program run by uid
// 1000 stays uid 1000.
func TestSetuidBinary(t *testing.T) {
	requireRoot(t)
	dir := userDir(t, 0o755)
	id := filepath.Join(dir, "id")
	src, err := os.Open("/usr/bin/id")
	if err != nil {
		t.Skip("no /usr/bin/id to copy")
	}
	defer src.Close()
	dst, err := os.OpenFile(id, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	if err := os.Chmod(id, 0o4755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	// Without the hardening the copy must escalate, or the probe proves
	// nothing (a nosuid mount, say).
	control := exec.Command(id, "-u")
	control.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	if out, err := control.Output(); err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Skipf("the setuid copy does not escalate even without hardening (%q, %v): nosuid temporary directory?", out, err)
	}
	if got := runProbe(t, "", "setuid_binary", envSetuid+"="+id).outcome; got != "euid=1000" {
		t.Errorf("setuid-root id run by uid 1000 after Apply: got %s, want euid=1000", got)
	}
}

// TestOrdinaryWork: after Apply the daemon can still run shell commands,
// start commands as uid 1000, fork/exec concurrently and make threads.
func TestOrdinaryWork(t *testing.T) {
	requireRoot(t)
	dir := userDir(t, 0o1777)
	if got := runProbe(t, "", "work", envDir+"="+dir).outcome; got != "ok" {
		t.Errorf("ordinary work after Apply: %s", got)
	}
}

// TestUnknownCapability fails before changing anything, so it runs in
// this process.
func TestUnknownCapability(t *testing.T) {
	before := procStatus(t, "CapEff")
	_, err := Apply(Options{KeepCaps: []string{"CAP_CHOWN", "CAP_NO_SUCH"}})
	if err == nil || !strings.Contains(err.Error(), `unknown capability "CAP_NO_SUCH"`) {
		t.Fatalf("Apply with an unknown capability: got %v, want an error naming it", err)
	}
	if after := procStatus(t, "CapEff"); after != before {
		t.Errorf("CapEff changed from %s to %s", before, after)
	}
}

func TestCapMask(t *testing.T) {
	tests := []struct {
		names []string
		want  uint64
	}{
		{nil, 0},
		{[]string{"CAP_CHOWN"}, 1},
		{[]string{"chown", "Cap_Kill"}, 1 | 1<<5},
		{DefaultKeepCaps(), 0x4fb},
		{[]string{"CAP_CHECKPOINT_RESTORE"}, 1 << 40},
	}
	for _, tt := range tests {
		got, err := capMask(tt.names)
		if err != nil || got != tt.want {
			t.Errorf("capMask(%q) = %#x, %v; want %#x", tt.names, got, err, tt.want)
		}
	}
	if got := maskNames(0x4fb); !cmp.Equal(got, DefaultKeepCaps()) {
		t.Errorf("maskNames(0x4fb) = %q, want %q", got, DefaultKeepCaps())
	}
	if got := capName(41); got != "CAP_41" {
		t.Errorf("capName(41) = %q", got)
	}
}

func TestDefaultWritable(t *testing.T) {
	got, err := DefaultWritable()
	if err != nil {
		t.Fatal(err)
	}
	has := map[string]bool{}
	for _, p := range got {
		has[p] = true
	}
	for _, p := range []string{"/tmp", "/dev/null", "/dev/pts", "/dev/shm"} {
		if !has[p] {
			t.Errorf("DefaultWritable() = %q lacks %s", got, p)
		}
	}
	for _, p := range []string{"/", "/proc", "/sys", "/dev"} {
		if has[p] {
			t.Errorf("DefaultWritable() = %q has %s", got, p)
		}
	}
	entries, _ := os.ReadDir("/")
	for _, e := range entries {
		if e.Type()&os.ModeSymlink != 0 && has["/"+e.Name()] {
			t.Errorf("DefaultWritable() has the symbolic link /%s", e.Name())
		}
	}
}

func TestStrictWritable(t *testing.T) {
	got := StrictWritable("/workspace")
	want := []string{"/workspace", "/tmp", "/var/tmp", "/home", "/root", "/run",
		"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
		"/dev/tty", "/dev/ptmx", "/dev/pts", "/dev/shm"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("StrictWritable (-want +got):\n%s", diff)
	}
}
