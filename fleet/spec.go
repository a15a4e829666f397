package fleet

import (
	"fmt"
	"maps"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/manifest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Checking a create request and turning it into a runtime spec.

// teamLabel marks a runtime sandbox with the team that asked for it, so
// a server that died between creating a sandbox and recording it can tell
// the orphan from sandboxes that are not its own.
const teamLabel = "cove.team"

// OwnLabelPrefix starts the labels the server keeps for itself on a
// record (the team, a front door's tokens): a tenant may not set them
// and never sees them.
const OwnLabelPrefix = "cove."

// UserLabels are a record's labels without the server's own.
func UserLabels(l map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		if !strings.HasPrefix(k, OwnLabelPrefix) {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// invalid is an ErrInvalid that says what to fix.
func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, sandbox.ErrInvalid)...)
}

// Seconds turns a count of seconds (field names it in messages) into a
// duration, refusing negatives and anything over max with ErrInvalid.
func Seconds(field string, n int64, max time.Duration) (time.Duration, error) {
	if n < 0 {
		return 0, invalid("%s: %d is negative; give a number of seconds >= 0", field, n)
	}
	if n > int64(max/time.Second) {
		return 0, invalid("%s: %d is over the limit of %d seconds", field, n, int64(max/time.Second))
	}
	return time.Duration(n) * time.Second, nil
}

// checkSize checks the resources a create asks for and sets them over
// the size's (preset). Each range is what a sandbox can start with and
// the host can back: a limit out of it is ErrInvalid with the range, not
// a failure deep in the runtime.
func (f *Fleet) checkSize(preset *api.Size, req api.CreateSandbox) error {
	switch {
	case math.IsNaN(req.CPUs) || req.CPUs < 0 || req.CPUs > 0 && req.CPUs < api.MinCPUs || req.CPUs > api.MaxCPUs:
		return invalid("cpus: %v is out of range; give %g to %d (or leave it out for the size's)", req.CPUs, api.MinCPUs, api.MaxCPUs)
	case req.CPUs > f.cfg.MaxCPUs:
		return invalid("cpus: %v is more than this server's %g CPUs; give at most %g (or leave it out for the size's)", req.CPUs, f.cfg.MaxCPUs, f.cfg.MaxCPUs)
	case req.MemoryBytes < 0 || req.MemoryBytes > 0 && req.MemoryBytes < api.MinMemoryBytes || req.MemoryBytes > api.MaxMemoryBytes:
		return invalid("memory_bytes: %d is out of range; give %d (64 MiB) to %d (1 TiB) (or leave it out for the size's)", req.MemoryBytes, int64(api.MinMemoryBytes), int64(api.MaxMemoryBytes))
	case req.DiskBytes < 0 || req.DiskBytes > 0 && req.DiskBytes < api.MinDiskBytes || req.DiskBytes > api.MaxDiskBytes:
		return invalid("disk_bytes: %d is out of range; give %d (16 MiB) to %d (1 TiB) (or leave it out for the size's)", req.DiskBytes, int64(api.MinDiskBytes), int64(api.MaxDiskBytes))
	}
	switch {
	case req.Pids == api.PidsUnlimited && !f.cfg.AllowUnlimitedPids:
		return invalid("pids: %d (no limit) is not allowed on this server; give %d to %d (or leave it out for the size's)", req.Pids, api.MinPids, f.cfg.MaxPids)
	case req.Pids == api.PidsUnlimited:
	case req.Pids < 0 || req.Pids > 0 && req.Pids < api.MinPids || req.Pids > f.cfg.MaxPids:
		unlimited := ""
		if f.cfg.AllowUnlimitedPids {
			unlimited = fmt.Sprintf(", or %d for no limit", api.PidsUnlimited)
		}
		return invalid("pids: %d is out of range; give %d to %d%s (or leave it out for the size's)", req.Pids, api.MinPids, f.cfg.MaxPids, unlimited)
	}
	if req.CPUs > 0 {
		preset.CPUs = req.CPUs
	}
	// A preset larger than the machine (large on a 2-CPU host) gets
	// what there is, and its record says so.
	preset.CPUs = min(preset.CPUs, f.cfg.MaxCPUs)
	if req.MemoryBytes > 0 {
		preset.MemoryBytes = req.MemoryBytes
	}
	if req.DiskBytes > 0 {
		preset.DiskBytes = req.DiskBytes
	}
	if req.Pids != 0 {
		preset.Pids = req.Pids
	}
	return nil
}

// CheckLabel checks a label (what names a sandbox's labels in messages:
// "label", or E2B's "metadata"). Keys are filtered on as key=value and
// both are shown in terminals and the UI, so neither may hold control
// characters or invalid UTF-8, and keys no "=".
func CheckLabel(what, k, v string) error {
	bad := func(s string) bool {
		return !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) })
	}
	switch {
	case k == "" || len(k) > 63:
		return invalid("%s key %q: keys are 1 to 63 bytes", what, k)
	case bad(k) || strings.Contains(k, "="):
		return invalid("%s key %q: keys may not hold control characters, invalid UTF-8 or \"=\"", what, k)
	case strings.HasPrefix(k, OwnLabelPrefix):
		return invalid("%s key %q: keys may not start with cove. (the server's own)", what, k)
	case len(v) > 256:
		return invalid("%s %q: values are at most 256 bytes", what, k)
	case bad(v):
		return invalid("%s %q: values may not hold control characters or invalid UTF-8", what, k)
	}
	return nil
}

// specFor checks a create request and turns it into a runtime spec and a
// record (without id). The manifest, when any, is returned to apply.
func (f *Fleet) specFor(req api.CreateSandbox, team string) (sandbox.Spec, store.Sandbox, *manifest.Manifest, error) {
	var rec store.Sandbox
	size := req.Size
	if size == "" {
		size = "small"
	}
	preset, ok := api.Sizes[size]
	if !ok {
		return sandbox.Spec{}, rec, nil, invalid("size %q: use small, medium or large, or give cpus, memory_bytes and disk_bytes", req.Size)
	}
	if err := f.checkSize(&preset, req); err != nil {
		return sandbox.Spec{}, rec, nil, err
	}
	ttl, err := Seconds("ttl_seconds", req.TTLSeconds, f.cfg.MaxTTL)
	if err != nil {
		return sandbox.Spec{}, rec, nil, err
	}
	if ttl == 0 {
		ttl = f.cfg.DefaultTTL
	}
	idle, err := Seconds("idle_timeout_seconds", req.IdleTimeoutSeconds, f.cfg.MaxTTL)
	if err != nil {
		return sandbox.Spec{}, rec, nil, err
	}
	switch req.OnExpire {
	case "":
		req.OnExpire = store.ExpireStop
	case store.ExpireStop, store.ExpireDelete:
	default:
		return sandbox.Spec{}, rec, nil, invalid("on_expire %q: use stop (keep the disk) or delete", req.OnExpire)
	}
	labels, err := checkLabels(req.Labels, team)
	if err != nil {
		return sandbox.Spec{}, rec, nil, err
	}
	spec := sandbox.Spec{
		Template: req.Template, Root: req.Root, User: req.User, Env: maps.Clone(req.Env), Labels: labels, TTL: ttl,
		Isolation: req.Isolation,
		Limits:    sandbox.Limits{CPUs: preset.CPUs, MemoryBytes: preset.MemoryBytes, DiskBytes: preset.DiskBytes, Pids: preset.Pids},
	}
	if spec.Network, err = networkOf(req.Network); err != nil {
		return sandbox.Spec{}, rec, nil, err
	}
	var m *manifest.Manifest
	if len(req.Manifest) > 0 {
		if m, err = manifest.Parse(req.Manifest); err != nil {
			return sandbox.Spec{}, rec, nil, fmt.Errorf("manifest: %w", err)
		}
		if spec.Root == "" {
			spec.Root = m.RootDir()
		}
		env := m.Env()
		maps.Copy(env, spec.Env)
		spec.Env = env
	}
	if err := spec.Normalize(); err != nil {
		return sandbox.Spec{}, rec, nil, err
	}
	rec = store.Sandbox{TeamID: team, Spec: spec, Size: req.Size, IdleTimeout: idle, OnExpire: req.OnExpire}
	return spec, rec, m, nil
}

// checkLabels checks a create's labels and adds the team's.
func checkLabels(l map[string]string, team string) (map[string]string, error) {
	if len(l) > 64 {
		return nil, invalid("labels: at most 64")
	}
	labels := map[string]string{teamLabel: team}
	for k, v := range l {
		if err := CheckLabel("label", k, v); err != nil {
			return nil, err
		}
		labels[k] = v
	}
	return labels, nil
}

// networkOf checks a create's network policy.
func networkOf(n *api.Network) (sandbox.Network, error) {
	if n == nil {
		return sandbox.Network{}, nil
	}
	switch n.Mode {
	case "", "none":
		if len(n.Allow) > 0 {
			return sandbox.Network{}, invalid("network.allow is for mode allow, not %q", n.Mode)
		}
		return sandbox.Network{}, nil
	case "internet", "allow":
		if len(n.Allow) > 64 {
			return sandbox.Network{}, invalid("network.allow: at most 64 entries")
		}
		return sandbox.Network{Mode: n.Mode, Allow: n.Allow}, nil
	}
	return sandbox.Network{}, invalid("network.mode %q: want none, internet or allow", n.Mode)
}
