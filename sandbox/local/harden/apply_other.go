//go:build !linux

package harden

import "errors"

// Apply fails everywhere but Linux: the layers it sets are Linux's.
func Apply(opts Options) (Report, error) {
	return Report{}, errors.New("hardening: only Linux has capabilities, seccomp and Landlock")
}

// ShrinkBoundingSet is Linux-only.
func ShrinkBoundingSet(extra []string) error {
	return errors.New("hardening: only Linux has capability bounding sets")
}
