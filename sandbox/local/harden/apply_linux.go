package harden

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Apply hardens the calling process, every thread of it, for good:
// capabilities, then no_new_privs, then seccomp, then Landlock (see the
// package documentation). Call it once, after the sandbox's mounts and
// before serving.
//
// A layer the kernel lacks is skipped and explained in Report.Skipped.
// Any other failure is an error, and then the process is left partly
// hardened: the daemon must exit rather than serve. The errors are:
// an unknown name in opts.KeepCaps (nothing has been changed yet), a
// capability that could not be dropped (the caller lacks CAP_SETPCAP),
// no_new_privs or the seccomp filter not taking on a kernel that has
// them, or a Landlock ruleset that could not be built or enforced.
func Apply(opts Options) (Report, error) {
	var r Report
	keepNames := opts.KeepCaps
	if keepNames == nil {
		keepNames = DefaultKeepCaps()
	}
	keep, err := capMask(keepNames)
	if err != nil {
		return r, fmt.Errorf("hardening: %w", err)
	}
	writable := opts.Writable
	if writable == nil {
		if writable, err = DefaultWritable(); err != nil {
			return r, fmt.Errorf("hardening: %w", err)
		}
	}

	kept, err := dropCaps(keep)
	if err != nil {
		return r, fmt.Errorf("hardening: %w", err)
	}
	r.CapsKept = maskNames(kept)

	// Seccomp needs no_new_privs from a caller without CAP_SYS_ADMIN, so
	// it comes first. EINVAL means a kernel before 3.5, which has
	// neither.
	switch err := allThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1); {
	case errors.Is(err, unix.EINVAL):
		r.Skipped = append(r.Skipped, "no_new_privs: not supported by the kernel (older than 3.5)")
	case err != nil:
		return r, fmt.Errorf("hardening: setting no_new_privs: %w", err)
	default:
		r.NoNewPrivs = true
	}

	if why := seccompMissing(); why != "" && !opts.GVisor {
		r.Skipped = append(r.Skipped, why)
	} else if !r.NoNewPrivs {
		r.Skipped = append(r.Skipped, "seccomp: needs no_new_privs")
	} else if err := installFilter(buildFilter(rules())); err != nil {
		return r, fmt.Errorf("hardening: %w", err)
	} else {
		r.Seccomp = true
	}

	abi, skipped, err := restrictPaths(writable)
	r.Skipped = append(r.Skipped, skipped...)
	if err != nil {
		return r, fmt.Errorf("hardening: %w", err)
	}
	r.Landlock = abi
	return r, nil
}
