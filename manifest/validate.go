package manifest

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/cove-sandbox/cove/sandbox"
)

// Validate checks the manifest without touching any filesystem: the root
// is absolute and clean; every entry path is relative, non-empty, free of
// ".." and NUL, and names a distinct place inside the root; nothing is
// placed below a file; required fields are set; names of users, groups and
// variables are usable. It reports every problem it finds, each naming its
// entry or field, joined into one error that wraps sandbox.ErrInvalid.
func (m *Manifest) Validate() error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }

	if m.Version != 0 && m.Version != CurrentVersion {
		add(invalidf("manifest: version %d is not supported; use %d", m.Version, CurrentVersion))
	}
	root := m.RootDir()
	switch {
	case strings.IndexByte(root, 0) >= 0:
		add(invalidf("manifest: root %q contains a NUL byte", root))
	case !path.IsAbs(root):
		add(invalidf("manifest: root %q must be an absolute path such as %s", root, sandbox.DefaultRoot))
	case path.Clean(root) != root:
		add(invalidf("manifest: root %q is not clean; use %q", root, path.Clean(root)))
	case len(root) > sandbox.MaxPathLen:
		add(invalidf("manifest: root is longer than %d bytes", sandbox.MaxPathLen))
	}
	if len(errs) > 0 {
		// Entry checks resolve paths against the root.
		return errors.Join(errs...)
	}

	// placed maps each entry's clean path to its path as written and its
	// entry, to find duplicates and entries placed below files.
	placed := map[string]placedEntry{}
	var walk func(entries map[string]Entry, parentWritten, parentClean string)
	walk = func(entries map[string]Entry, parentWritten, parentClean string) {
		for _, name := range sortedKeys(entries) {
			e := entries[name]
			written := name
			if parentWritten != "" {
				written = parentWritten + "/" + name
			}
			where := fmt.Sprintf("entry %q", written)
			if err := checkEntryName(name, where); err != nil {
				add(err)
				continue
			}
			clean := path.Join(parentClean, name)
			if _, err := sandbox.ResolvePath(root, clean); err != nil {
				add(fmt.Errorf("%s: %w", where, err))
				continue
			}
			if prev, ok := placed[clean]; ok {
				add(invalidf("%s: names the same place as entry %q (%s); keep one", where, prev.written, clean))
				continue
			}
			if e == nil {
				add(invalidf("%s: has no value; give it a type", where))
				continue
			}
			placed[clean] = placedEntry{written, e}
			for _, err := range checkEntry(e, where) {
				add(err)
			}
			if d, ok := e.(Dir); ok {
				walk(d.Children, written, clean)
			}
		}
	}
	walk(m.Entries, "", "")

	for _, clean := range sortedKeys(placed) {
		for dir := path.Dir(clean); dir != "."; dir = path.Dir(dir) {
			if parent, ok := placed[dir]; ok && !isDirLike(parent.entry) {
				add(invalidf("entry %q: goes below entry %q, which is a %s, not a directory", placed[clean].written, parent.written, parent.entry.Type()))
				break
			}
		}
	}

	for _, name := range sortedKeys(m.Environment) {
		v := m.Environment[name]
		switch {
		case name == "":
			add(invalidf("environment: a variable has an empty name"))
		case strings.ContainsAny(name, "=\x00"):
			add(invalidf("environment variable %q: names cannot contain \"=\" or NUL", name))
		case strings.IndexByte(v.Value, 0) >= 0:
			add(invalidf("environment variable %q: value contains a NUL byte", name))
		}
	}
	for i, u := range m.Users {
		if err := checkAccountName(u.Name); err != nil {
			add(fmt.Errorf("users[%d]: %w", i, err))
		}
	}
	for i, g := range m.Groups {
		if err := checkAccountName(g.Name); err != nil {
			add(fmt.Errorf("groups[%d]: %w", i, err))
		}
		for j, u := range g.Users {
			if err := checkAccountName(u.Name); err != nil {
				add(fmt.Errorf("groups[%d].users[%d]: %w", i, j, err))
			}
		}
	}
	return errors.Join(errs...)
}

type placedEntry struct {
	written string
	entry   Entry
}

// windowsAbs matches paths such as C:\x or C:/x, which the SDK refuses as
// absolute even on Linux; refusing them too keeps manifests portable.
var windowsAbs = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z]:[/\\]`) })

// checkEntryName checks one key of entries or children.
func checkEntryName(name, where string) error {
	switch {
	case name == "":
		return invalidf("%s: path is empty; name a file or directory below the root", where)
	case strings.IndexByte(name, 0) >= 0:
		return invalidf("%s: path contains a NUL byte", where)
	case !utf8.ValidString(name):
		// JSON cannot carry it: the manifest would not survive a round trip.
		return invalidf("%s: path is not valid UTF-8", where)
	case strings.HasPrefix(name, "/"), windowsAbs().MatchString(name), strings.HasPrefix(name, `\\`):
		return invalidf("%s: path must be relative to the workspace root, not absolute", where)
	case slices.Contains(strings.Split(name, "/"), ".."):
		return invalidf("%s: path must not contain \"..\"", where)
	case path.Clean(name) == ".":
		return invalidf("%s: path names the directory itself; name a file or directory below it", where)
	}
	return nil
}

// checkEntry checks one entry's own fields.
func checkEntry(e Entry, where string) []error {
	var errs []error
	meta := e.meta()
	if meta.Group != "" {
		if err := checkAccountName(meta.Group); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
	}
	if p := meta.Permissions; p != nil && (p.Owner > 7 || p.Group > 7 || p.Other > 7) {
		errs = append(errs, invalidf("%s: permissions must be octal digits 0-7, got %d%d%d", where, p.Owner, p.Group, p.Other))
	}
	switch e := e.(type) {
	case File, Dir:
	case LocalFile:
		if e.Src == "" {
			errs = append(errs, invalidf("%s: \"src\" must name a host file", where))
		}
		if strings.IndexByte(e.Src, 0) >= 0 {
			errs = append(errs, invalidf("%s: \"src\" contains a NUL byte", where))
		}
	case LocalDir:
		if strings.IndexByte(e.Src, 0) >= 0 {
			errs = append(errs, invalidf("%s: \"src\" contains a NUL byte", where))
		}
	case GitRepo:
		for _, f := range []struct{ key, val string }{{"host", e.Host}, {"repo", e.Repo}, {"ref", e.Ref}} {
			if err := checkGitArg(f.key, f.val, where); err != nil {
				errs = append(errs, err)
			}
		}
		if e.Ref != "" && strings.ContainsFunc(e.Ref, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			errs = append(errs, invalidf("%s: \"ref\" %q contains a space or control character", where, e.Ref))
		}
		sub := strings.TrimLeft(e.Subpath, "/")
		if strings.IndexByte(sub, 0) >= 0 || slices.Contains(strings.Split(sub, "/"), "..") {
			// The clone is on the host: a ".." here would read host
			// files outside it.
			errs = append(errs, invalidf("%s: \"subpath\" %q must be a path inside the repository, without \"..\" or NUL", where, e.Subpath))
		}
	default:
		// *File and friends satisfy Entry too, through method promotion;
		// Apply and the JSON code work on the values.
		errs = append(errs, invalidf("%s: entry of Go type %T is not supported; use the value type (manifest.File, not *manifest.File)", where, e))
	}
	return errs
}

// checkGitArg checks a value that becomes a git command-line argument.
// The host may be empty (it defaults); repo and ref may not.
func checkGitArg(key, val, where string) error {
	switch {
	case val == "" && key == "host":
		return nil
	case val == "":
		return invalidf("%s: %q is required", where, key)
	case strings.IndexByte(val, 0) >= 0:
		return invalidf("%s: %q contains a NUL byte", where, key)
	case strings.HasPrefix(val, "-"):
		// git would take it for an option.
		return invalidf("%s: %q %q must not start with \"-\"", where, key, val)
	}
	return nil
}

// accountName is what useradd and groupadd accept without --badname
// (shadow's default rule), at most 32 bytes.
var accountName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,30}\$?$`) })

// checkAccountName checks a user or group name.
func checkAccountName(name string) error {
	if !accountName().MatchString(name) {
		return invalidf("name %q is not a valid user or group name; start with a-z or \"_\", then use a-z, 0-9, \"_\" or \"-\", at most 32 characters", name)
	}
	return nil
}

// sortedKeys returns a map's keys in order, so work and errors are
// deterministic.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
