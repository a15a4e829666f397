package manifest

import (
	"errors"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
)

func TestValidate(t *testing.T) {
	file := File{Content: []byte("x")}
	tests := []struct {
		name string
		m    Manifest
		want []string // substrings of the error; none means valid
	}{
		{name: "zero manifest", m: Manifest{}},
		{name: "every kind", m: Manifest{
			Root: "/",
			Entries: map[string]Entry{
				"a.txt":   file,
				"d":       Dir{Children: map[string]Entry{"x/y": file}},
				"d/z":     file, // below a dir entry: fine
				"src":     LocalDir{Src: "src"},
				"src/gen": LocalFile{Src: "gen"}, // over a copied tree: fine
				"r":       GitRepo{Repo: "o/n", Ref: "main", Subpath: "/docs/"},
				"./dot":   file,
			},
			Environment: map[string]EnvVar{"PATH": {Value: "/bin"}},
			Users:       []User{{Name: "alice"}, {Name: "_svc$"}},
			Groups:      []Group{{Name: "dev-team", Users: []User{{Name: "bob"}}}},
		}},
		{name: "version", m: Manifest{Version: 3}, want: []string{"manifest: version 3 is not supported"}},
		{name: "relative root", m: Manifest{Root: "ws"}, want: []string{`root "ws" must be an absolute path`}},
		{name: "unclean root", m: Manifest{Root: "/ws/../x/"}, want: []string{`root "/ws/../x/" is not clean; use "/x"`}},
		{name: "NUL root", m: Manifest{Root: "/w\x00"}, want: []string{"contains a NUL byte"}},
		{name: "empty path", m: Manifest{Entries: map[string]Entry{"": file}}, want: []string{`entry "": path is empty`}},
		{name: "absolute path", m: Manifest{Entries: map[string]Entry{"/etc/x": file}}, want: []string{`entry "/etc/x": path must be relative`}},
		{name: "windows absolute path", m: Manifest{Entries: map[string]Entry{`C:\x`: file}}, want: []string{`path must be relative`}},
		{name: "dot-dot", m: Manifest{Entries: map[string]Entry{"a/../../x": file}}, want: []string{`entry "a/../../x": path must not contain ".."`}},
		{name: "NUL in path", m: Manifest{Entries: map[string]Entry{"a\x00b": file}}, want: []string{`entry "a\x00b": path contains a NUL byte`}},
		{name: "not UTF-8", m: Manifest{Entries: map[string]Entry{"a\xff": file}}, want: []string{`entry "a\xff": path is not valid UTF-8`}},
		{name: "dot", m: Manifest{Entries: map[string]Entry{"./": file}}, want: []string{`entry "./": path names the directory itself`}},
		{name: "over-long name", m: Manifest{Entries: map[string]Entry{strings.Repeat("n", 300): file}}, want: []string{"longer than the 255-byte limit"}},
		{
			name: "bad child names the full path",
			m:    Manifest{Entries: map[string]Entry{"d": Dir{Children: map[string]Entry{"e": Dir{Children: map[string]Entry{"../x": file}}}}}},
			want: []string{`entry "d/e/../x": path must not contain ".."`},
		},
		{
			name: "same place twice",
			m:    Manifest{Entries: map[string]Entry{"a": file, "./a": file}},
			want: []string{`entry "a": names the same place as entry "./a" (a)`},
		},
		{
			name: "child and top level collide",
			m:    Manifest{Entries: map[string]Entry{"d": Dir{Children: map[string]Entry{"f": file}}, "d/f": file}},
			want: []string{`names the same place as entry`},
		},
		{
			name: "below a file",
			m:    Manifest{Entries: map[string]Entry{"f": LocalFile{Src: "x"}, "f/g/h": file}},
			want: []string{`entry "f/g/h": goes below entry "f", which is a local_file, not a directory`},
		},
		{name: "nil entry", m: Manifest{Entries: map[string]Entry{"a": nil}}, want: []string{`entry "a": has no value`}},
		{name: "pointer entry", m: Manifest{Entries: map[string]Entry{"a": &File{}}}, want: []string{`entry "a": entry of Go type *manifest.File is not supported`}},
		{name: "local_file without src", m: Manifest{Entries: map[string]Entry{"a": LocalFile{}}}, want: []string{`entry "a": "src" must name a host file`}},
		{name: "NUL in src", m: Manifest{Entries: map[string]Entry{"a": LocalDir{Src: "x\x00"}}}, want: []string{`entry "a": "src" contains a NUL byte`}},
		{name: "git without repo and ref", m: Manifest{Entries: map[string]Entry{"r": GitRepo{}}}, want: []string{`entry "r": "repo" is required`, `entry "r": "ref" is required`}},
		{name: "git option injection", m: Manifest{Entries: map[string]Entry{"r": GitRepo{Host: "-oProxyCommand=x", Repo: "--bare", Ref: "main"}}}, want: []string{`"host" "-oProxyCommand=x" must not start with "-"`, `"repo" "--bare" must not start with "-"`}},
		{name: "git ref with space", m: Manifest{Entries: map[string]Entry{"r": GitRepo{Repo: "o/n", Ref: "a b"}}}, want: []string{`"ref" "a b" contains a space`}},
		{name: "git subpath escapes", m: Manifest{Entries: map[string]Entry{"r": GitRepo{Repo: "o/n", Ref: "main", Subpath: "docs/../../.."}}}, want: []string{`"subpath" "docs/../../.." must be a path inside the repository`}},
		{name: "bad entry group", m: Manifest{Entries: map[string]Entry{"a": File{Meta: Meta{Group: "Dev Team"}}}}, want: []string{`entry "a": name "Dev Team" is not a valid user or group name`}},
		{name: "permissions out of range", m: Manifest{Entries: map[string]Entry{"a": File{Meta: Meta{Permissions: perm(9, 0, 0)}}}}, want: []string{`entry "a": permissions must be octal digits 0-7, got 900`}},
		{name: "env name", m: Manifest{Environment: map[string]EnvVar{"A=B": {}, "": {}}}, want: []string{`environment: a variable has an empty name`, `environment variable "A=B": names cannot contain "="`}},
		{name: "env value NUL", m: Manifest{Environment: map[string]EnvVar{"A": {Value: "\x00"}}}, want: []string{`environment variable "A": value contains a NUL byte`}},
		{name: "user name", m: Manifest{Users: []User{{Name: "-r"}}}, want: []string{`users[0]: name "-r" is not a valid`}},
		{name: "group member name", m: Manifest{Groups: []Group{{Name: "g", Users: []User{{Name: "root:x"}}}}}, want: []string{`groups[0].users[0]: name "root:x"`}},
		{name: "long user name", m: Manifest{Users: []User{{Name: strings.Repeat("a", 33)}}}, want: []string{`users[0]: name`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.m.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: got error %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: got nil, want an error containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: got error %q, want it to contain %q", err, w)
				}
			}
			if !errors.Is(err, sandbox.ErrInvalid) {
				t.Errorf("Validate: got error %v, want one wrapping sandbox.ErrInvalid", err)
			}
		})
	}
}
