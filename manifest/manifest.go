// Package manifest describes a sandbox workspace portably and builds it
// through a sandbox.Session: files with contents, host files and folders to
// copy in, git repositories, environment variables, users and groups. The
// same manifest builds the same workspace on any Cove runtime. Its JSON
// form is compatible with the OpenAI Agents SDK's sandbox Manifest
// (src/agents/sandbox/manifest.py and entries/ in openai-agents-python):
// what the SDK writes parses here, and what this package writes parses
// there (json.go lists the few differences).
//
// The package has three parts: the types and their JSON (Parse,
// MarshalJSON), lexical checks (Validate), and Apply, which materializes a
// manifest into a running sandbox using only the Session interface.
package manifest

import (
	"io/fs"

	"github.com/cove-sandbox/cove/sandbox"
)

// CurrentVersion is the only manifest version this package reads and
// writes; the SDK's Manifest.version is Literal[1].
const CurrentVersion = 1

// DefaultGitHost is the host of a git_repo entry that names none, as in the
// SDK's GitRepo.host default.
const DefaultGitHost = "github.com"

// Entry type discriminators: the "type" field of an entry's JSON object.
const (
	TypeFile      = "file"
	TypeDir       = "dir"
	TypeLocalFile = "local_file"
	TypeLocalDir  = "local_dir"
	TypeGitRepo   = "git_repo"
)

// entryTypes lists the discriminators in the order error messages show them.
var entryTypes = []string{TypeFile, TypeDir, TypeLocalFile, TypeLocalDir, TypeGitRepo}

// Manifest describes a workspace. The zero value is an empty manifest
// rooted at sandbox.DefaultRoot.
type Manifest struct {
	// Version is the format version; 0 means CurrentVersion.
	Version int
	// Root is the absolute, clean workspace path inside the sandbox; ""
	// means sandbox.DefaultRoot.
	Root string
	// Entries maps a path relative to Root ("src/main.go", "data") to what
	// goes there.
	Entries map[string]Entry
	// Environment holds variables for every process in the sandbox; merge
	// Env() into sandbox.Spec.Env when creating it.
	Environment map[string]EnvVar
	// Users are accounts to create in the sandbox.
	Users []User
	// Groups are groups to create; their Users are created too and added
	// to them.
	Groups []Group
}

// RootDir returns m.Root, or sandbox.DefaultRoot when it is empty.
func (m *Manifest) RootDir() string {
	if m.Root == "" {
		return sandbox.DefaultRoot
	}
	return m.Root
}

// Env returns the environment variables' values, ready to merge into
// sandbox.Spec.Env. It returns nil when there are none.
func (m *Manifest) Env() map[string]string {
	if len(m.Environment) == 0 {
		return nil
	}
	env := make(map[string]string, len(m.Environment))
	for k, v := range m.Environment {
		env[k] = v.Value
	}
	return env
}

// EnvVar is one environment variable. In JSON it is a plain string when it
// has only a value, and the SDK's EnvEntry object
// ({"value": {"type": "str", "value": ...}, "description": ..., "ephemeral": ...})
// otherwise.
type EnvVar struct {
	Value       string
	Description string
	// Ephemeral marks a value that should not be persisted with the
	// workspace (the SDK's EnvEntry.ephemeral); Cove keeps it as data.
	Ephemeral bool
}

// User is an account to create in the sandbox (the SDK's User).
type User struct {
	Name string `json:"name"`
}

// Group is a group to create in the sandbox, with its members (the SDK's
// Group).
type Group struct {
	Name  string `json:"name"`
	Users []User `json:"users"`
}

// Entry is one item of the workspace: File, Dir, LocalFile, LocalDir or
// GitRepo. The set is closed; the JSON "type" field picks the kind.
type Entry interface {
	// Type returns the JSON discriminator, one of the Type* constants.
	Type() string
	// meta returns the fields every entry kind shares.
	meta() Meta
}

// Meta holds the fields every entry kind shares (the SDK's BaseEntry).
type Meta struct {
	// Description is free text for people and models reading the manifest.
	Description string
	// Ephemeral marks an entry that should not be persisted with the
	// workspace (the SDK skips it in snapshots); Apply creates it as usual.
	Ephemeral bool
	// Group, when set, names the group that owns the entry (chgrp, not
	// recursive, as the SDK does).
	Group string
	// Permissions, when set, are the entry's permission bits; nil means the
	// default for the kind (see Apply).
	Permissions *Permissions
}

func (m Meta) meta() Meta { return m }

// Permissions are Unix permission bits in the SDK's shape: one octal digit
// (read 4, write 2, execute 1) each for the owner, the group and others.
type Permissions struct {
	Owner, Group, Other uint8
}

// Mode returns the permissions as file mode bits (0o755 for 7, 5, 5).
func (p Permissions) Mode() fs.FileMode {
	return fs.FileMode(p.Owner&7)<<6 | fs.FileMode(p.Group&7)<<3 | fs.FileMode(p.Other&7)
}

// PermissionsOf returns the permissions of mode's permission bits.
func PermissionsOf(mode fs.FileMode) *Permissions {
	return &Permissions{Owner: uint8(mode>>6) & 7, Group: uint8(mode>>3) & 7, Other: uint8(mode) & 7}
}

// File is a file with inline contents.
type File struct {
	// Content is the file's bytes. In JSON it is a string: the UTF-8 text
	// itself, or base64 with "encoding": "base64" (always used when the
	// bytes are not valid UTF-8).
	Content []byte
	Meta
}

// Dir is a directory, possibly with entries inside it.
type Dir struct {
	// Children maps a path relative to the directory to what goes there.
	Children map[string]Entry
	Meta
}

// LocalFile is a file copied in from the host running Apply.
type LocalFile struct {
	// Src is the host path; a relative one is resolved against
	// ApplyOptions.BaseDir. A symlink is refused.
	Src string
	Meta
}

// LocalDir is a host directory copied in recursively.
type LocalDir struct {
	// Src is the host path; a relative one is resolved against
	// ApplyOptions.BaseDir. "" creates an empty directory, as in the SDK,
	// where src is optional. A symlink anywhere in the tree is refused.
	Src string
	Meta
}

// GitRepo is a git repository checked out at a ref; Apply clones it on the
// host (the sandbox usually has no network) and copies the files in.
//
// The clone URL is built as follows. A Repo that is already a URL (it
// contains "://") or an absolute host path is used as is. Otherwise Host
// and Repo are joined: a Host that is a URL or an absolute path gives
// Host + "/" + Repo (for local mirrors and tests), and a plain host name
// gives "https://" + Host + "/" + Repo + ".git", the SDK's form
// (".git" is not doubled).
type GitRepo struct {
	// Host is the server; "" means DefaultGitHost.
	Host string
	// Repo is the repository: "owner/name" on Host, a URL, or a path.
	Repo string
	// Ref is the branch, tag or commit to check out. Required.
	Ref string
	// Subpath, when set, copies only this directory of the repository
	// (a leading "/" is ignored, as in the SDK).
	Subpath string
	Meta
}

// Type returns TypeFile.
func (File) Type() string { return TypeFile }

// Type returns TypeDir.
func (Dir) Type() string { return TypeDir }

// Type returns TypeLocalFile.
func (LocalFile) Type() string { return TypeLocalFile }

// Type returns TypeLocalDir.
func (LocalDir) Type() string { return TypeLocalDir }

// Type returns TypeGitRepo.
func (GitRepo) Type() string { return TypeGitRepo }

// isDirLike reports whether an entry becomes a directory in the sandbox, so
// other entries may be placed below it.
func isDirLike(e Entry) bool {
	switch e.(type) {
	case Dir, LocalDir, GitRepo:
		return true
	}
	return false
}
