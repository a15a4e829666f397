//go:build linux && !amd64

package harden

// int80Refused: no int $0x80 probe runs off amd64.
func int80Refused() string { return "ENOSYS" }
