package server

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
)

// The secret key seals the web UI's sessions and the team secrets kept
// for agent runs (runs.Service.Sealer). One server makes its own in its
// data directory (secret.key) on first start. Replicas on several hosts
// each have their own data directory, so each would make its own, and a
// session signed in on one would not open on another (nor a secret set
// through one): they all read one key from a file instead
// (cove serve --secret-key-file), as Kubernetes mounts a Secret.

// secretKeySize is the key's length: AES-256.
const secretKeySize = 32

// makeKeyHint says how to make a key file, for the errors.
const makeKeyHint = "make one with: (umask 077; head -c 32 /dev/urandom > FILE); " +
	"or, to keep the sessions and team secrets of a server that made its own, copy its DATA/secret.key"

// ReadSecretKeyFile reads a secret key from path: 32 bytes as they are,
// or as 64 hex digits, or in base64 (standard or URL alphabet, padded or
// not), text forms with surrounding white space allowed. The file must
// not be readable or writable by others, nor writable by its group
// (readable by its group is allowed: Kubernetes gives a pod's fsGroup
// read access to a Secret's files that way). The errors say what is
// wrong and how to make a key; they never show the file's content.
func ReadSecretKeyFile(path string) ([]byte, error) {
	fi, err := os.Stat(path) // a Secret's file in a pod is a link: its target counts
	if err != nil {
		return nil, fmt.Errorf("--secret-key-file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("--secret-key-file %s is not a file; %s", path, makeKeyHint)
	}
	if perm := fi.Mode().Perm(); perm&0o027 != 0 {
		return nil, fmt.Errorf("--secret-key-file %s has mode %04o: others (or its group, to write) could read or replace the key that seals every session; chmod 600 it (0440 with a group that must read it; a Kubernetes Secret volume: defaultMode 0400 or 0440)", path, perm)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--secret-key-file: %w", err)
	}
	key, ok := parseSecretKey(b)
	if !ok {
		return nil, fmt.Errorf("--secret-key-file %s holds %d bytes, which are not a key: want 32 bytes, 64 hex digits or 32 bytes in base64; %s", path, len(b), makeKeyHint)
	}
	return key, nil
}

// parseSecretKey is the key b holds, in one of ReadSecretKeyFile's forms.
// The lengths tell them apart: raw is 32 bytes exactly (a newline after
// them would make 33, so raw bytes are never trimmed), hex 64 digits,
// base64 43 or 44 characters.
func parseSecretKey(b []byte) ([]byte, bool) {
	if len(b) == secretKeySize {
		return bytes.Clone(b), true
	}
	text := string(bytes.TrimSpace(b))
	if len(text) == 2*secretKeySize {
		if key, err := hex.DecodeString(text); err == nil {
			return key, true
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if key, err := enc.DecodeString(text); err == nil && len(key) == secretKeySize {
			return key, true
		}
	}
	return nil, false
}
