//go:build linux && !amd64 && !arm64

package harden

import (
	"errors"
	"runtime"

	"golang.org/x/sys/unix"
)

// The deny-list is written for amd64 and arm64 only: elsewhere Apply goes
// without seccomp and says so, since a filter naming the wrong syscall
// numbers would be worse than none.

type rule struct{}

func rules() []rule { return nil }

func buildFilter([]rule) []unix.SockFilter { return nil }

func seccompMissing() string {
	return "seccomp: there is no filter for " + runtime.GOARCH
}

func installFilter([]unix.SockFilter) error {
	return errors.New("no seccomp filter for " + runtime.GOARCH)
}
