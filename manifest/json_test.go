package manifest

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/sandbox"
)

// perm is shorthand for test permissions.
func perm(owner, group, other uint8) *Permissions {
	return &Permissions{Owner: owner, Group: group, Other: other}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want *Manifest
	}{{
		name: "empty object gets defaults",
		in:   `{}`,
		want: &Manifest{Version: 1, Root: "/workspace"},
	}, {
		name: "nulls are defaults",
		in:   `{"version": null, "root": null, "entries": null, "environment": null, "users": null, "groups": null}`,
		want: &Manifest{Version: 1, Root: "/workspace"},
	}, {
		name: "file with UTF-8 content",
		in:   `{"root": "/home/agent", "entries": {"a/b.txt": {"type": "file", "content": "héllo\n"}}}`,
		want: &Manifest{Version: 1, Root: "/home/agent", Entries: map[string]Entry{
			"a/b.txt": File{Content: []byte("héllo\n")},
		}},
	}, {
		name: "file with base64 content",
		in:   `{"entries": {"bin": {"type": "file", "content": "AP8BAg==", "encoding": "base64"}}}`,
		want: &Manifest{Version: 1, Root: "/workspace", Entries: map[string]Entry{
			"bin": File{Content: []byte{0, 0xff, 1, 2}},
		}},
	}, {
		name: "empty file",
		in:   `{"entries": {"empty": {"type": "file", "content": ""}}}`,
		want: &Manifest{Version: 1, Root: "/workspace", Entries: map[string]Entry{"empty": File{}}},
	}, {
		name: "nested dirs",
		in: `{"entries": {"d": {"type": "dir", "children": {
			"e": {"type": "dir", "children": {"f.txt": {"type": "file", "content": "x"}}},
			"empty": {"type": "dir", "children": {}}}}}}`,
		want: &Manifest{Version: 1, Root: "/workspace", Entries: map[string]Entry{
			"d": Dir{Children: map[string]Entry{
				"e":     Dir{Children: map[string]Entry{"f.txt": File{Content: []byte("x")}}},
				"empty": Dir{},
			}},
		}},
	}, {
		name: "local_file and local_dir",
		in: `{"entries": {"f": {"type": "local_file", "src": "/etc/hostname"},
			"d": {"type": "local_dir", "src": "proj"}, "e": {"type": "local_dir"}}}`,
		want: &Manifest{Version: 1, Root: "/workspace", Entries: map[string]Entry{
			"f": LocalFile{Src: "/etc/hostname"},
			"d": LocalDir{Src: "proj"},
			"e": LocalDir{},
		}},
	}, {
		name: "git_repo host defaults to github.com",
		in:   `{"entries": {"r": {"type": "git_repo", "repo": "o/n", "ref": "v1", "subpath": "docs"}}}`,
		want: &Manifest{Version: 1, Root: "/workspace", Entries: map[string]Entry{
			"r": GitRepo{Host: "github.com", Repo: "o/n", Ref: "v1", Subpath: "docs"},
		}},
	}, {
		name: "permissions take the SDK's defaults for missing digits",
		in:   `{"entries": {"f": {"type": "file", "content": "", "permissions": {"other": 4}}}}`,
		want: &Manifest{Version: 1, Root: "/workspace", Entries: map[string]Entry{
			"f": File{Meta: Meta{Permissions: perm(7, 0, 4)}},
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse: got error %v, want nil", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseSDK reads a manifest as the SDK's model_dump(mode="json")
// writes it, with every default spelled out.
func TestParseSDK(t *testing.T) {
	data, err := os.ReadFile("testdata/sdk_manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse: got error %v, want nil", err)
	}
	want := &Manifest{
		Version: 1,
		Root:    "/workspace",
		Entries: map[string]Entry{
			"README.md": File{Content: []byte("# hello\n"), Meta: Meta{Permissions: perm(7, 5, 5)}},
			"data": Dir{
				Children: map[string]Entry{
					"config.json": File{Content: []byte("{}"), Meta: Meta{
						Description: "config", Ephemeral: true, Group: "alice", Permissions: perm(6, 4, 4),
					}},
				},
				Meta: Meta{Description: "inputs for the task", Group: "dev", Permissions: perm(7, 7, 5)},
			},
			"notes.txt": LocalFile{Src: "notes.txt", Meta: Meta{Permissions: perm(7, 5, 5)}},
			"src":       LocalDir{Src: "project/src", Meta: Meta{Permissions: perm(7, 5, 5)}},
			"repo": GitRepo{Host: "github.com", Repo: "openai/openai-agents-python", Ref: "main",
				Meta: Meta{Permissions: perm(7, 5, 5)}},
		},
		Environment: map[string]EnvVar{
			"PLAIN":   {Value: "1"},
			"TYPED":   {Value: "2"},
			"WRAPPED": {Value: "3", Description: "a token", Ephemeral: true},
		},
		Users:  []User{{Name: "alice"}},
		Groups: []Group{{Name: "dev", Users: []User{{Name: "alice"}}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse mismatch (-want +got):\n%s", diff)
	}
	if got, want := got.Env(), map[string]string{"PLAIN": "1", "TYPED": "2", "WRAPPED": "3"}; !cmp.Equal(got, want) {
		t.Errorf("Env() = %v, want %v", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	deep := `{"type": "file", "content": ""}`
	for range maxDepth + 2 {
		deep = `{"type": "dir", "children": {"d": ` + deep + `}}`
	}
	tests := []struct {
		name string
		in   string
		want string // substring of the error
	}{
		{"invalid JSON", `{"entries": `, "manifest: not valid JSON"},
		{"not an object", `[1]`, "manifest: must be a JSON object, got an array"},
		{"unknown top-level field", `{"entry": {}}`, `manifest: unknown field "entry"`},
		{"unsupported version", `{"version": 2}`, "manifest: version 2 is not supported; use 1"},
		{"entries not an object", `{"entries": []}`, "entries: must be a JSON object, got an array"},
		{"entry not an object", `{"entries": {"a": "x"}}`, `entry "a": must be a JSON object, got a string`},
		{
			"unknown type",
			`{"entries": {"src/x": {"type": "foo"}}}`,
			`entry "src/x": unknown type "foo"; use one of file, dir, local_file, local_dir, git_repo`,
		},
		{
			"unknown type nested",
			`{"entries": {"d": {"type": "dir", "children": {"e": {"type": "dir", "children": {"x": {"type": "s3_mount"}}}}}}}`,
			`entry "d/e/x": unknown type "s3_mount"`,
		},
		{"missing type", `{"entries": {"a": {"content": "x"}}}`, `entry "a": missing "type"; use one of file,`},
		{"type not a string", `{"entries": {"a": {"type": 1}}}`, `entry "a": "type" must be a string, got a number`},
		{"file without content", `{"entries": {"a": {"type": "file"}}}`, `entry "a": "content" is required`},
		{"file with null content", `{"entries": {"a": {"type": "file", "content": null}}}`, `entry "a": "content" is required`},
		{"content not a string", `{"entries": {"a": {"type": "file", "content": [1]}}}`, `entry "a": "content" must be a string, got an array`},
		{"bad base64", `{"entries": {"a": {"type": "file", "content": "!!", "encoding": "base64"}}}`, `entry "a": "content" is not valid base64`},
		{"unknown encoding", `{"entries": {"a": {"type": "file", "content": "", "encoding": "hex"}}}`, `entry "a": unknown encoding "hex"`},
		{"unknown entry field", `{"entries": {"a": {"type": "file", "content": "", "contents": "x"}}}`, `entry "a": unknown field "contents"`},
		{"field of another type", `{"entries": {"a": {"type": "dir", "src": "x"}}}`, `entry "a": unknown field "src"`},
		{"local_file without src", `{"entries": {"a": {"type": "local_file"}}}`, `entry "a": "src" is required`},
		{"local_file with empty src", `{"entries": {"a": {"type": "local_file", "src": ""}}}`, `entry "a": "src" must name a host file`},
		{"allow_outside_base_dir", `{"entries": {"a": {"type": "local_dir", "src": "/", "allow_outside_base_dir": true}}}`, `entry "a": "allow_outside_base_dir" cannot be set from manifest data`},
		{"git_repo without repo", `{"entries": {"r": {"type": "git_repo", "ref": "main"}}}`, `entry "r": "repo" is required`},
		{"git_repo without ref", `{"entries": {"r": {"type": "git_repo", "repo": "o/n"}}}`, `entry "r": "ref" is required`},
		{"git_repo ref option", `{"entries": {"r": {"type": "git_repo", "repo": "o/n", "ref": "--upload-pack=x"}}}`, `entry "r": "ref" "--upload-pack=x" must not start with "-"`},
		{"permission digit too big", `{"entries": {"a": {"type": "file", "content": "", "permissions": {"owner": 8}}}}`, `entry "a": permissions: "owner" must be an octal digit 0-7`},
		{"permission negative", `{"entries": {"a": {"type": "file", "content": "", "permissions": {"group": -1}}}}`, `entry "a": permissions: "group" must be an octal digit`},
		{"permission unknown field", `{"entries": {"a": {"type": "file", "content": "", "permissions": {"mode": 420}}}}`, `entry "a": permissions: unknown field "mode"`},
		{"group without name", `{"entries": {"a": {"type": "file", "content": "", "group": {}}}}`, `entry "a": group: "name" is required`},
		{"ephemeral not a bool", `{"entries": {"a": {"type": "file", "content": "", "ephemeral": "yes"}}}`, `entry "a": "ephemeral" must be true or false, got a string`},
		{"flat environment", `{"environment": {"FOO": "bar"}}`, `environment: unknown field "FOO"; variables go under "value"`},
		{"environment value type", `{"environment": {"value": {"A": {"type": "secret", "value": "x"}}}}`, `environment variable "A": unknown value type "secret"; use "str"`},
		{"environment entry without value", `{"environment": {"value": {"A": {"description": "x"}}}}`, `environment variable "A": "value" is required`},
		{"environment number", `{"environment": {"value": {"A": 1}}}`, `environment variable "A": must be a string or an object`},
		{"group without users", `{"groups": [{"name": "dev"}]}`, `groups[0]: "users" is required (use [] for none)`},
		{"user without name", `{"users": [{}]}`, `users[0]: "name" is required`},
		{"users not a list", `{"users": {"name": "a"}}`, `users: must be a list`},
		{"extra_path_grants", `{"extra_path_grants": [{"path": "/"}]}`, `manifest: "extra_path_grants" cannot be set from manifest data`},
		{"too deep", `{"entries": {"d": ` + deep + `}}`, `children: dir entries nest more than 64 deep`},
		// Parse also validates.
		{"absolute entry path", `{"entries": {"/etc/passwd": {"type": "file", "content": ""}}}`, `entry "/etc/passwd": path must be relative`},
		{"relative root", `{"root": "workspace"}`, `manifest: root "workspace" must be an absolute path`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse: got %+v, nil error; want error containing %q", m, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse: got error %q, want it to contain %q", err, tt.want)
			}
			if !errors.Is(err, sandbox.ErrInvalid) {
				t.Errorf("Parse: got error %v, want one wrapping sandbox.ErrInvalid", err)
			}
		})
	}
}

func TestMarshal(t *testing.T) {
	tests := []struct {
		name string
		in   Manifest
		want string
	}{{
		name: "zero manifest",
		in:   Manifest{},
		want: `{"version":1,"root":"/workspace","entries":{}}`,
	}, {
		name: "text and binary files",
		in: Manifest{Entries: map[string]Entry{
			"a": File{Content: []byte("hi")},
			"b": File{Content: []byte{0xff, 0}},
			"c": File{},
		}},
		want: `{"version":1,"root":"/workspace","entries":{` +
			`"a":{"type":"file","content":"hi"},` +
			`"b":{"type":"file","content":"/wA=","encoding":"base64"},` +
			`"c":{"type":"file","content":""}}}`,
	}, {
		name: "meta fields",
		in: Manifest{Entries: map[string]Entry{
			"d": Dir{Meta: Meta{Description: "x", Ephemeral: true, Group: "dev", Permissions: perm(7, 5, 0)}},
		}},
		want: `{"version":1,"root":"/workspace","entries":{"d":{"type":"dir","children":{},` +
			`"description":"x","ephemeral":true,"group":{"name":"dev"},"permissions":{"owner":7,"group":5,"other":0}}}}`,
	}, {
		name: "git host default and local entries",
		in: Manifest{Root: "/w", Entries: map[string]Entry{
			"r": GitRepo{Repo: "o/n", Ref: "main"},
			"f": LocalFile{Src: "x"},
			"e": LocalDir{},
		}},
		want: `{"version":1,"root":"/w","entries":{` +
			`"e":{"type":"local_dir"},` +
			`"f":{"type":"local_file","src":"x"},` +
			`"r":{"type":"git_repo","host":"github.com","repo":"o/n","ref":"main"}}}`,
	}, {
		name: "environment users groups",
		in: Manifest{
			Environment: map[string]EnvVar{"A": {Value: "1"}, "B": {Value: "2", Description: "d"}},
			Users:       []User{{Name: "u"}},
			Groups:      []Group{{Name: "g"}},
		},
		want: `{"version":1,"root":"/workspace","entries":{},"environment":{"value":{` +
			`"A":"1","B":{"value":{"type":"str","value":"2"},"description":"d"}}},` +
			`"users":[{"name":"u"}],"groups":[{"name":"g","users":[]}]}`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.in)
			if err != nil {
				t.Fatalf("Marshal: got error %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("Marshal:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestRoundTrip checks that a manifest built in Go, marshaled and parsed,
// comes back equal, for every kind of entry and field.
func TestRoundTrip(t *testing.T) {
	in := &Manifest{
		Version: 1,
		Root:    "/srv/ws",
		Entries: map[string]Entry{
			"text.txt": File{Content: []byte("line\n<&>\u2028"), Meta: Meta{Description: "d", Permissions: perm(6, 4, 0)}},
			"bin":      File{Content: []byte{0, 1, 0xfe, 0xff}, Meta: Meta{Ephemeral: true}},
			"tree": Dir{Children: map[string]Entry{
				"sub/deeper": Dir{Children: map[string]Entry{"x": File{Content: []byte("x")}}},
				"empty":      Dir{Meta: Meta{Group: "dev"}},
			}},
			"host.txt": LocalFile{Src: "../host.txt"},
			"proj":     LocalDir{Src: "/abs/proj", Meta: Meta{Permissions: perm(7, 7, 7)}},
			"repo":     GitRepo{Host: "gitlab.example.com", Repo: "a/b", Ref: "0123abcd", Subpath: "/pkg"},
		},
		Environment: map[string]EnvVar{"X": {Value: "1"}, "Y": {Value: "", Ephemeral: true}},
		Users:       []User{{Name: "alice"}, {Name: "bob"}},
		Groups:      []Group{{Name: "dev", Users: []User{{Name: "alice"}}}, {Name: "ops", Users: nil}},
	}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	got, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse(%s): %v", data, err)
	}
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("round trip mismatch (-want +got):\n%s\nJSON: %s", diff, data)
	}
}
