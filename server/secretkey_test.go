package server

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadSecretKeyFile: each form gives the same key; a wrong length or
// a file others may read is refused with what is wrong and how to make
// one, and the content is never in the error.
func TestReadSecretKeyFile(t *testing.T) {
	key := bytes.Repeat([]byte{0xa7}, 32)
	key[31] = '\n' // raw bytes are not trimmed
	dir := t.TempDir()
	write := func(name string, data []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"raw", key},
		{"hex", []byte(hex.EncodeToString(key) + "\n")},
		{"base64", []byte(base64.StdEncoding.EncodeToString(key) + "\n")},
		{"base64url", []byte(" " + base64.RawURLEncoding.EncodeToString(key))},
	} {
		got, err := ReadSecretKeyFile(write(tc.name, tc.data, 0o600))
		if err != nil || !bytes.Equal(got, key) {
			t.Errorf("%s: got %x, %v; want %x", tc.name, got, err, key)
		}
	}
	if _, err := ReadSecretKeyFile(write("group", []byte(hex.EncodeToString(key)), 0o440)); err != nil {
		t.Errorf("a key its group may read (a pod's fsGroup): %v", err)
	}
	const secretText = "correct horse battery staple"
	for _, tc := range []struct {
		name string
		data []byte
		mode os.FileMode
		want string
	}{
		{"short", []byte(secretText), 0o600, "not a key"},
		{"long", append(bytes.Clone(key), 0), 0o600, "head -c 32 /dev/urandom"},
		{"badhex", []byte(strings.Repeat("zz", 32)), 0o600, "64 hex digits"},
		{"worldreadable", key, 0o644, "chmod 600"},
		{"groupwritable", key, 0o660, "mode 0660"},
	} {
		_, err := ReadSecretKeyFile(write(tc.name, tc.data, tc.mode))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error saying %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), secretText) {
			t.Errorf("%s: the error shows the file's content: %v", tc.name, err)
		}
	}
	if _, err := ReadSecretKeyFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file was accepted")
	}
	if _, err := ReadSecretKeyFile(dir); err == nil || !strings.Contains(err.Error(), "not a file") {
		t.Errorf("a directory: got %v", err)
	}
}
