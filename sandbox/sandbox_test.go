package sandbox

import (
	"errors"
	"testing"
)

func TestSpecNormalize(t *testing.T) {
	tests := []struct {
		name     string
		spec     Spec
		wantRoot string
		wantErr  bool
	}{
		{"default root", Spec{}, DefaultRoot, false},
		{"cleaned root", Spec{Root: "/srv//ws/./"}, "/srv/ws", false},
		{"relative root", Spec{Root: "workspace"}, "", true},
		{"root is /", Spec{Root: "/"}, "", true},
		{"root climbs", Spec{Root: "/../etc"}, "", true},
		{"NUL in root", Spec{Root: "/a\x00b"}, "", true},
		{"bad env name", Spec{Env: map[string]string{"A=B": "x"}}, "", true},
		{"empty env name", Spec{Env: map[string]string{"": "x"}}, "", true},
		{"negative memory", Spec{Limits: Limits{MemoryBytes: -1}}, "", true},
		{"negative TTL", Spec{TTL: -1}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.spec
			err := s.Normalize()
			if tt.wantErr {
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("Normalize(%+v) = %v, want ErrInvalid", tt.spec, err)
				}
				return
			}
			if err != nil || s.Root != tt.wantRoot {
				t.Errorf("Normalize(%+v): root %q, err %v; want root %q", tt.spec, s.Root, err, tt.wantRoot)
			}
		})
	}
}
