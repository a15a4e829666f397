package manifest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/cove-sandbox/cove/sandbox"
)

// The JSON shapes below follow the SDK's pydantic models
// (openai-agents-python src/agents/sandbox/manifest.py, entries/base.py,
// entries/artifacts.py, types.py). Where they differ it is said so:
//
//   - Parsing is strict where the SDK is lenient: an unknown field is an
//     error (the SDK ignores it), so a typo such as "contents" does not
//     silently produce an empty file. Every field the SDK itself writes is
//     accepted, including ones Cove ignores (is_dir, permissions.directory,
//     remote_mount_command_allowlist, an empty extra_path_grants).
//   - File.content is bytes in the SDK, which pydantic writes to JSON as a
//     UTF-8 string and cannot write at all when the bytes are not UTF-8.
//     Cove adds "encoding": "base64" for such content; the SDK ignores the
//     field, so it reads base64 text, but it could not express the bytes
//     anyway.
//   - Empty and default fields are left out when writing (the SDK writes
//     every field with its default); the SDK fills the same defaults when
//     reading, except that a missing "permissions" means 0755 there (see
//     Apply).
//   - Dir entries may nest at most maxDepth deep.

// Top-level fields the SDK writes that Cove accepts and ignores.
const (
	fieldExtraPathGrants = "extra_path_grants"
	fieldRemoteMountCmds = "remote_mount_command_allowlist"
)

// Parse decodes a manifest from JSON and validates it. Every error wraps
// sandbox.ErrInvalid and says which entry or field is wrong.
func Parse(data []byte) (*Manifest, error) {
	m := new(Manifest)
	if err := m.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// UnmarshalJSON decodes a manifest strictly: unknown fields, unknown entry
// types and missing required fields are errors wrapping sandbox.ErrInvalid.
// Defaults are filled in (Version 1, Root sandbox.DefaultRoot, git host
// github.com). It does not run Validate; Parse does both.
func (m *Manifest) UnmarshalJSON(data []byte) error {
	obj, err := decodeObject(data, "manifest")
	if err != nil {
		return err
	}
	if err := obj.allow("version", "root", "entries", "environment", "users", "groups",
		fieldExtraPathGrants, fieldRemoteMountCmds); err != nil {
		return err
	}
	var out Manifest
	out.Version = CurrentVersion
	if raw, ok := obj.get("version"); ok {
		var v int
		if err := json.Unmarshal(raw, &v); err != nil {
			return invalidf("manifest: \"version\" must be the number %d, got %s", CurrentVersion, describe(bytes.TrimSpace(raw)))
		}
		if v != CurrentVersion {
			return invalidf("manifest: version %d is not supported; use %d", v, CurrentVersion)
		}
	}
	if out.Root, _, err = obj.str("root", false); err != nil {
		return err
	}
	if out.Root == "" {
		out.Root = sandbox.DefaultRoot
	}
	if raw, ok := obj.get("entries"); ok {
		if out.Entries, err = decodeEntries(raw, "", 0); err != nil {
			return err
		}
	}
	if raw, ok := obj.get("environment"); ok {
		if out.Environment, err = decodeEnvironment(raw); err != nil {
			return err
		}
	}
	if raw, ok := obj.get("users"); ok {
		if out.Users, err = decodeUsers(raw, "users"); err != nil {
			return err
		}
	}
	if raw, ok := obj.get("groups"); ok {
		if out.Groups, err = decodeGroups(raw); err != nil {
			return err
		}
	}
	if raw, ok := obj.get(fieldExtraPathGrants); ok {
		// The SDK refuses grants that come from manifest data: they widen
		// what the sandbox may touch on the host and must be configured in
		// trusted code. Cove has no such grants.
		var grants []json.RawMessage
		if err := json.Unmarshal(raw, &grants); err != nil || len(grants) > 0 {
			return invalidf("manifest: %q cannot be set from manifest data; remove it", fieldExtraPathGrants)
		}
	}
	if raw, ok := obj.get(fieldRemoteMountCmds); ok {
		// Only meaningful for the SDK's remote mounts, which Cove does not
		// have; checked for shape, then dropped.
		var cmds []string
		if err := json.Unmarshal(raw, &cmds); err != nil {
			return invalidf("manifest: %q must be a list of strings", fieldRemoteMountCmds)
		}
	}
	*m = out
	return nil
}

// MarshalJSON encodes the manifest in the SDK-compatible shape. Empty
// environment, users and groups are left out; entries is always written.
func (m Manifest) MarshalJSON() ([]byte, error) {
	type wireEnv struct {
		Value map[string]EnvVar `json:"value"`
	}
	w := struct {
		Version     int              `json:"version"`
		Root        string           `json:"root"`
		Entries     map[string]Entry `json:"entries"`
		Environment *wireEnv         `json:"environment,omitempty"`
		Users       []User           `json:"users,omitempty"`
		Groups      []Group          `json:"groups,omitempty"`
	}{
		Version: m.Version,
		Root:    m.RootDir(),
		Entries: m.Entries,
		Users:   m.Users,
		Groups:  m.Groups,
	}
	if w.Version == 0 {
		w.Version = CurrentVersion
	}
	if w.Entries == nil {
		w.Entries = map[string]Entry{}
	}
	if len(m.Environment) > 0 {
		w.Environment = &wireEnv{Value: m.Environment}
	}
	return json.Marshal(w)
}

// MarshalJSON writes a plain string when the variable has only a value,
// and the SDK's EnvEntry object otherwise.
func (v EnvVar) MarshalJSON() ([]byte, error) {
	if v.Description == "" && !v.Ephemeral {
		return json.Marshal(v.Value)
	}
	type strValue struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	}
	return json.Marshal(struct {
		Value       strValue `json:"value"`
		Description string   `json:"description,omitempty"`
		Ephemeral   bool     `json:"ephemeral,omitempty"`
	}{strValue{"str", v.Value}, v.Description, v.Ephemeral})
}

// MarshalJSON writes users as [] rather than null: the SDK requires the
// field.
func (g Group) MarshalJSON() ([]byte, error) {
	users := g.Users
	if users == nil {
		users = []User{}
	}
	return json.Marshal(struct {
		Name  string `json:"name"`
		Users []User `json:"users"`
	}{g.Name, users})
}

// wireMeta is the JSON of Meta, embedded in each entry's wire struct.
type wireMeta struct {
	Description string           `json:"description,omitempty"`
	Ephemeral   bool             `json:"ephemeral,omitempty"`
	Group       *User            `json:"group,omitempty"`
	Permissions *wirePermissions `json:"permissions,omitempty"`
}

type wirePermissions struct {
	Owner uint8 `json:"owner"`
	Group uint8 `json:"group"`
	Other uint8 `json:"other"`
}

func (m Meta) wire() wireMeta {
	w := wireMeta{Description: m.Description, Ephemeral: m.Ephemeral}
	if m.Group != "" {
		w.Group = &User{Name: m.Group}
	}
	if p := m.Permissions; p != nil {
		w.Permissions = &wirePermissions{p.Owner, p.Group, p.Other}
	}
	return w
}

// MarshalJSON writes {"type": "file", "content": ...}, adding
// "encoding": "base64" when the content is not valid UTF-8.
func (f File) MarshalJSON() ([]byte, error) {
	w := struct {
		Type     string `json:"type"`
		Content  string `json:"content"`
		Encoding string `json:"encoding,omitempty"`
		wireMeta
	}{Type: TypeFile, wireMeta: f.wire()}
	if utf8.Valid(f.Content) {
		w.Content = string(f.Content)
	} else {
		w.Content = base64.StdEncoding.EncodeToString(f.Content)
		w.Encoding = "base64"
	}
	return json.Marshal(w)
}

// MarshalJSON writes {"type": "dir", "children": {...}}.
func (d Dir) MarshalJSON() ([]byte, error) {
	children := d.Children
	if children == nil {
		children = map[string]Entry{}
	}
	return json.Marshal(struct {
		Type     string           `json:"type"`
		Children map[string]Entry `json:"children"`
		wireMeta
	}{TypeDir, children, d.wire()})
}

// MarshalJSON writes {"type": "local_file", "src": ...}.
func (f LocalFile) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Type string `json:"type"`
		Src  string `json:"src"`
		wireMeta
	}{TypeLocalFile, f.Src, f.wire()})
}

// MarshalJSON writes {"type": "local_dir", "src": ...}, leaving src out
// when it is empty.
func (d LocalDir) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Type string `json:"type"`
		Src  string `json:"src,omitempty"`
		wireMeta
	}{TypeLocalDir, d.Src, d.wire()})
}

// MarshalJSON writes {"type": "git_repo", "host", "repo", "ref",
// "subpath"}, with host defaulted to github.com.
func (g GitRepo) MarshalJSON() ([]byte, error) {
	host := g.Host
	if host == "" {
		host = DefaultGitHost
	}
	return json.Marshal(struct {
		Type    string `json:"type"`
		Host    string `json:"host"`
		Repo    string `json:"repo"`
		Ref     string `json:"ref"`
		Subpath string `json:"subpath,omitempty"`
		wireMeta
	}{TypeGitRepo, host, g.Repo, g.Ref, g.Subpath, g.wire()})
}

// object is a decoded JSON object whose members are still raw, so each can
// be checked and decoded with an error that names where it is.
type object struct {
	where   string // "manifest", `entry "src/x"`, ...
	members map[string]json.RawMessage
}

// decodeObject decodes data, which must be a JSON object.
func decodeObject(data []byte, where string) (object, error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return object{}, invalidf("%s: empty; want a JSON object", where)
	}
	if trimmed[0] != '{' {
		if !json.Valid(data) {
			return object{}, jsonError(where, data)
		}
		return object{}, invalidf("%s: must be a JSON object, got %s", where, describe(trimmed))
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return object{}, jsonError(where, data)
	}
	return object{where: where, members: members}, nil
}

// jsonError explains why data is not valid JSON.
func jsonError(where string, data []byte) error {
	var v any
	err := json.Unmarshal(data, &v)
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return invalidf("%s: not valid JSON: %v (at byte %d)", where, syn, syn.Offset)
	}
	if err == nil {
		return invalidf("%s: must be a JSON object", where)
	}
	return invalidf("%s: not valid JSON: %v", where, err)
}

// describe names the kind of a JSON value for error messages.
func describe(raw []byte) string {
	switch raw[0] {
	case '"':
		return "a string"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// isNull reports whether raw is the JSON null, which the SDK treats as
// "not set" for optional fields.
func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

// get returns a member that is present and not null.
func (o object) get(key string) (json.RawMessage, bool) {
	raw, ok := o.members[key]
	if !ok || isNull(raw) {
		return nil, false
	}
	return raw, true
}

// allow refuses members other than the given keys.
func (o object) allow(keys ...string) error {
	var unknown []string
	for k := range o.members {
		if !slices.Contains(keys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return invalidf("%s: unknown field %q; known fields are %s", o.where, unknown[0], strings.Join(keys, ", "))
}

// str decodes a string member; null and absence give "". A required member
// that is absent or null is an error.
func (o object) str(key string, required bool) (string, bool, error) {
	raw, ok := o.get(key)
	if !ok {
		if required {
			return "", false, invalidf("%s: %q is required", o.where, key)
		}
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, invalidf("%s: %q must be a string, got %s", o.where, key, describe(bytes.TrimSpace(raw)))
	}
	return s, true, nil
}

// boolean decodes a boolean member; null and absence give false.
func (o object) boolean(key string) (bool, error) {
	raw, ok := o.get(key)
	if !ok {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, invalidf("%s: %q must be true or false, got %s", o.where, key, describe(bytes.TrimSpace(raw)))
	}
	return b, nil
}

// members decodes a JSON object whose values stay raw (entries, children,
// environment values); null gives nil.
func members(raw json.RawMessage, where string) (map[string]json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	obj, err := decodeObject(raw, where)
	if err != nil {
		return nil, err
	}
	if len(obj.members) == 0 {
		return nil, nil
	}
	return obj.members, nil
}

// maxDepth bounds how deeply dir entries nest. Each level is decoded from
// its own raw bytes, so without a bound a small hostile document could
// cost time quadratic in its size; no real workspace needs more.
const maxDepth = 64

// decodeEntries decodes an entries or children object. prefix is the
// parent's path as written, so errors name nested entries in full.
func decodeEntries(raw json.RawMessage, prefix string, depth int) (map[string]Entry, error) {
	where := "entries"
	if prefix != "" {
		where = fmt.Sprintf("entry %q: children", prefix)
	}
	if depth > maxDepth {
		return nil, invalidf("%s: dir entries nest more than %d deep; use a path with several components as a key instead", where, maxDepth)
	}
	mem, err := members(raw, where)
	if err != nil || mem == nil {
		return nil, err
	}
	entries := make(map[string]Entry, len(mem))
	for name, raw := range mem {
		p := name
		if prefix != "" {
			p = prefix + "/" + name
		}
		e, err := decodeEntry(raw, p, depth)
		if err != nil {
			return nil, err
		}
		entries[name] = e
	}
	return entries, nil
}

// Fields every entry kind accepts. is_dir is written by the SDK but
// derived from the type, so it is read and ignored.
var metaFields = []string{"type", "description", "ephemeral", "group", "permissions", "is_dir"}

// decodeEntry decodes one entry; p is its path for error messages.
func decodeEntry(raw json.RawMessage, p string, depth int) (Entry, error) {
	obj, err := decodeObject(raw, fmt.Sprintf("entry %q", p))
	if err != nil {
		return nil, err
	}
	typ, ok, err := obj.str("type", false)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, invalidf("%s: missing \"type\"; use one of %s", obj.where, strings.Join(entryTypes, ", "))
	}
	if !slices.Contains(entryTypes, typ) {
		return nil, invalidf("%s: unknown type %q; use one of %s", obj.where, typ, strings.Join(entryTypes, ", "))
	}
	meta, err := decodeMeta(obj)
	if err != nil {
		return nil, err
	}
	switch typ {
	case TypeFile:
		if err := obj.allow(slices.Concat(metaFields, []string{"content", "encoding"})...); err != nil {
			return nil, err
		}
		content, err := decodeContent(obj)
		if err != nil {
			return nil, err
		}
		return File{Content: content, Meta: meta}, nil
	case TypeDir:
		if err := obj.allow(slices.Concat(metaFields, []string{"children"})...); err != nil {
			return nil, err
		}
		d := Dir{Meta: meta}
		if raw, ok := obj.get("children"); ok {
			if d.Children, err = decodeEntries(raw, p, depth+1); err != nil {
				return nil, err
			}
		}
		return d, nil
	case TypeLocalFile, TypeLocalDir:
		if _, ok := obj.members["allow_outside_base_dir"]; ok {
			// Trusted-only in the SDK too: manifest data must not widen
			// what it may read from the host.
			return nil, invalidf("%s: \"allow_outside_base_dir\" cannot be set from manifest data; choose ApplyOptions.BaseDir instead", obj.where)
		}
		if err := obj.allow(slices.Concat(metaFields, []string{"src"})...); err != nil {
			return nil, err
		}
		src, _, err := obj.str("src", typ == TypeLocalFile)
		if err != nil {
			return nil, err
		}
		if typ == TypeLocalFile {
			if src == "" {
				return nil, invalidf("%s: \"src\" must name a host file", obj.where)
			}
			return LocalFile{Src: src, Meta: meta}, nil
		}
		return LocalDir{Src: src, Meta: meta}, nil
	case TypeGitRepo:
		if err := obj.allow(slices.Concat(metaFields, []string{"host", "repo", "ref", "subpath"})...); err != nil {
			return nil, err
		}
		g := GitRepo{Meta: meta}
		if g.Host, _, err = obj.str("host", false); err != nil {
			return nil, err
		}
		if g.Host == "" {
			g.Host = DefaultGitHost
		}
		if g.Repo, _, err = obj.str("repo", true); err != nil {
			return nil, err
		}
		if g.Ref, _, err = obj.str("ref", true); err != nil {
			return nil, err
		}
		if g.Subpath, _, err = obj.str("subpath", false); err != nil {
			return nil, err
		}
		return g, nil
	default:
		// Unreachable: entryTypes lists exactly the cases above.
		return nil, invalidf("%s: unknown type %q", obj.where, typ)
	}
}

// decodeContent decodes a file's content and its optional encoding.
func decodeContent(obj object) ([]byte, error) {
	enc, _, err := obj.str("encoding", false)
	if err != nil {
		return nil, err
	}
	content, _, err := obj.str("content", true)
	if err != nil {
		return nil, err
	}
	var b []byte
	switch enc {
	case "", "utf-8", "utf8":
		b = []byte(content)
	case "base64":
		if b, err = base64.StdEncoding.DecodeString(content); err != nil {
			return nil, invalidf("%s: \"content\" is not valid base64: %v", obj.where, err)
		}
	default:
		return nil, invalidf("%s: unknown encoding %q; use \"base64\" or leave it out for UTF-8 text", obj.where, enc)
	}
	if len(b) == 0 {
		// One spelling of "empty" keeps decoded manifests comparable.
		return nil, nil
	}
	return b, nil
}

// decodeMeta decodes the fields every entry shares.
func decodeMeta(obj object) (Meta, error) {
	var m Meta
	var err error
	if m.Description, _, err = obj.str("description", false); err != nil {
		return m, err
	}
	if m.Ephemeral, err = obj.boolean("ephemeral"); err != nil {
		return m, err
	}
	if _, err = obj.boolean("is_dir"); err != nil {
		return m, err
	}
	if raw, ok := obj.get("group"); ok {
		// The SDK types this Group | User; only the name matters for
		// chgrp, so a Group's member list is accepted and dropped.
		g, err := decodeObject(raw, obj.where+": group")
		if err != nil {
			return m, err
		}
		if err := g.allow("name", "users"); err != nil {
			return m, err
		}
		if m.Group, _, err = g.str("name", true); err != nil {
			return m, err
		}
	}
	if raw, ok := obj.get("permissions"); ok {
		if m.Permissions, err = decodePermissions(raw, obj.where+": permissions"); err != nil {
			return m, err
		}
	}
	return m, nil
}

// decodePermissions decodes the SDK's Permissions object. Missing digits
// take the SDK's Permissions defaults (owner 7, group 0, other 0);
// directory is derived from the entry type and ignored.
func decodePermissions(raw json.RawMessage, where string) (*Permissions, error) {
	obj, err := decodeObject(raw, where)
	if err != nil {
		return nil, err
	}
	if err := obj.allow("owner", "group", "other", "directory"); err != nil {
		return nil, err
	}
	if _, err := obj.boolean("directory"); err != nil {
		return nil, err
	}
	p := &Permissions{Owner: 7}
	for _, f := range []struct {
		key string
		dst *uint8
	}{{"owner", &p.Owner}, {"group", &p.Group}, {"other", &p.Other}} {
		raw, ok := obj.get(f.key)
		if !ok {
			continue
		}
		var n int
		if err := json.Unmarshal(raw, &n); err != nil || n < 0 || n > 7 {
			return nil, invalidf("%s: %q must be an octal digit 0-7 (read 4 + write 2 + execute 1), got %s", where, f.key, bytes.TrimSpace(raw))
		}
		*f.dst = uint8(n)
	}
	return p, nil
}

// decodeEnvironment decodes the SDK's Environment: {"value": {NAME: v}}
// where v is a string, an EnvValue ({"type": "str", "value": ...}) or an
// EnvEntry ({"value": EnvValue, "description": ..., "ephemeral": ...}).
func decodeEnvironment(raw json.RawMessage) (map[string]EnvVar, error) {
	obj, err := decodeObject(raw, "environment")
	if err != nil {
		return nil, err
	}
	for k := range obj.members {
		if k != "value" {
			return nil, invalidf("environment: unknown field %q; variables go under \"value\": {\"environment\": {\"value\": {\"NAME\": \"value\"}}}", k)
		}
	}
	rawVal, ok := obj.get("value")
	if !ok {
		return nil, nil
	}
	mem, err := members(rawVal, "environment: value")
	if err != nil || mem == nil {
		return nil, err
	}
	env := make(map[string]EnvVar, len(mem))
	for name, raw := range mem {
		where := fmt.Sprintf("environment variable %q", name)
		v, err := decodeEnvVar(raw, where)
		if err != nil {
			return nil, err
		}
		env[name] = v
	}
	return env, nil
}

// decodeEnvVar decodes one environment member.
func decodeEnvVar(raw json.RawMessage, where string) (EnvVar, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return EnvVar{}, invalidf("%s: %v", where, err)
		}
		return EnvVar{Value: s}, nil
	}
	obj, err := decodeObject(raw, where)
	if err != nil {
		return EnvVar{}, invalidf("%s: must be a string or an object", where)
	}
	// As in the SDK, a "type" member marks a bare EnvValue; otherwise it
	// is an EnvEntry wrapping one.
	if _, ok := obj.members["type"]; ok {
		s, err := decodeEnvValue(raw, where)
		return EnvVar{Value: s}, err
	}
	if err := obj.allow("value", "description", "ephemeral"); err != nil {
		return EnvVar{}, err
	}
	var v EnvVar
	if v.Description, _, err = obj.str("description", false); err != nil {
		return v, err
	}
	if v.Ephemeral, err = obj.boolean("ephemeral"); err != nil {
		return v, err
	}
	inner, ok := obj.get("value")
	if !ok {
		return v, invalidf("%s: \"value\" is required", where)
	}
	v.Value, err = decodeEnvValue(inner, where+": value")
	return v, err
}

// decodeEnvValue decodes an EnvValue; only the SDK's "str" type exists.
func decodeEnvValue(raw json.RawMessage, where string) (string, error) {
	obj, err := decodeObject(raw, where)
	if err != nil {
		return "", err
	}
	typ, _, err := obj.str("type", true)
	if err != nil {
		return "", err
	}
	if typ != "str" {
		return "", invalidf("%s: unknown value type %q; use \"str\"", where, typ)
	}
	if err := obj.allow("type", "value"); err != nil {
		return "", err
	}
	s, _, err := obj.str("value", true)
	return s, err
}

// decodeUsers decodes a list of {"name": ...}.
func decodeUsers(raw json.RawMessage, where string) ([]User, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalidf("%s: must be a list of {\"name\": ...} objects", where)
	}
	var users []User
	for i, item := range items {
		obj, err := decodeObject(item, fmt.Sprintf("%s[%d]", where, i))
		if err != nil {
			return nil, err
		}
		if err := obj.allow("name"); err != nil {
			return nil, err
		}
		name, _, err := obj.str("name", true)
		if err != nil {
			return nil, err
		}
		users = append(users, User{Name: name})
	}
	return users, nil
}

// decodeGroups decodes a list of {"name": ..., "users": [...]}; users is
// required, as in the SDK.
func decodeGroups(raw json.RawMessage) ([]Group, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalidf("groups: must be a list of {\"name\": ..., \"users\": [...]} objects")
	}
	var groups []Group
	for i, item := range items {
		where := fmt.Sprintf("groups[%d]", i)
		obj, err := decodeObject(item, where)
		if err != nil {
			return nil, err
		}
		if err := obj.allow("name", "users"); err != nil {
			return nil, err
		}
		var g Group
		if g.Name, _, err = obj.str("name", true); err != nil {
			return nil, err
		}
		rawUsers, ok := obj.get("users")
		if !ok {
			return nil, invalidf("%s: \"users\" is required (use [] for none)", where)
		}
		if g.Users, err = decodeUsers(rawUsers, where+".users"); err != nil {
			return nil, err
		}
		groups = append(groups, g)
	}
	return groups, nil
}

// invalidf formats an error that wraps sandbox.ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, sandbox.ErrInvalid)...)
}
