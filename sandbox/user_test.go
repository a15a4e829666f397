package sandbox

import (
	"errors"
	"strings"
	"testing"
)

// TestValidUserName: user names are the POSIX portable set; anything that
// could lead a home directory out of the sandbox is refused.
func TestValidUserName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"user", true},
		{"root", true},
		{"0", true},
		{"1000", true},
		{"dev.user_1-x", true},
		{"A", true},
		{strings.Repeat("a", MaxUserNameLen), true},
		{"", false},
		{".", false},
		{"..", false},
		{"../../..", false},
		{"../../../tmp/x", false},
		{"/etc", false},
		{"a/b", false},
		{"-rf", false},
		{"user:1000", false},
		{"us er", false},
		{"user\x00", false},
		{"usér", false},
		{"user\n", false},
		{strings.Repeat("a", MaxUserNameLen+1), false},
	}
	for _, tt := range tests {
		err := ValidUserName(tt.name)
		if got := err == nil; got != tt.ok {
			t.Errorf("ValidUserName(%q) = %v, want ok %v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidUserName(%q) = %v, want ErrInvalid", tt.name, err)
		}
	}
}

// TestNormalizeUser: a spec's user is checked by Normalize; the error
// says what is allowed and names no path.
func TestNormalizeUser(t *testing.T) {
	for _, user := range []string{"../../..", "../../../var/tmp/x", "/var/tmp/x", "a/b", ".."} {
		s := Spec{User: user}
		err := s.Normalize()
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Normalize with user %q: %v, want ErrInvalid", user, err)
			continue
		}
		// The message may not echo the path-like name, nor name a path.
		if strings.Contains(err.Error(), "/") {
			t.Errorf("Normalize with user %q: the error %q holds a path", user, err)
		}
	}
	for _, user := range []string{"", "user", "root", "1000"} {
		s := Spec{User: user}
		if err := s.Normalize(); err != nil {
			t.Errorf("Normalize with user %q: %v", user, err)
		}
	}
}
