package workspace

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/sandbox"
)

// SkillFileName is the file that makes a directory a skill.
const SkillFileName = "SKILL.md"

// noDescription is what a skill without a description is listed with, as
// in the Agents SDK: the model can still use it when the user names it.
const noDescription = "No description provided."

// maxSkillBytes bounds how much of a SKILL.md is read: the frontmatter is
// at its top, and load_skill's answer goes into the conversation.
const maxSkillBytes = 64 << 10

// Skill is a skill found in the workspace: a directory with a SKILL.md
// whose frontmatter names and describes it.
type Skill struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Path is the SKILL.md's absolute path inside the sandbox; the
	// skill's other files (scripts/, references/, assets/) are beside it.
	Path string `json:"path"`
}

// SkippedSkill is a SKILL.md that Skills left out, and why.
type SkippedSkill struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// DefaultSkillsDirs are where Skills looks when given no directories,
// relative to the workspace root: ".agents", the Agents SDK's default
// skills_path (skills at .agents/<name>/SKILL.md), then ".agents/skills",
// where Codex looks in a repository. A directory under .agents without a
// SKILL.md (such as skills/ itself) is simply not a skill, so one
// workspace can use either layout.
func DefaultSkillsDirs() []string {
	return []string{".agents", ".agents/skills"}
}

// Skills finds the skills in dirs (relative to the workspace root;
// DefaultSkillsDirs when none): each direct subdirectory holding a
// SKILL.md is a skill. It returns them sorted by name.
//
// A SKILL.md must open with frontmatter: a "---" line, "key: value" lines,
// a closing "---" line (the simple YAML form the Agents SDK parses; block
// scalars and indented continuation lines are accepted too). "name"
// defaults to the directory's name and "description" to a placeholder, as
// in the SDK. A SKILL.md without frontmatter or with frontmatter that does
// not parse, or whose name an earlier skill already took, is left out and
// reported in skipped: one bad skill must not stop a run. The error is
// for the session failing (unreachable, stopped, ctx done).
func Skills(ctx context.Context, sess sandbox.Session, dirs ...string) (skills []Skill, skipped []SkippedSkill, err error) {
	if dirs == nil {
		dirs = DefaultSkillsDirs()
	}
	taken := map[string]string{} // name -> path
	for _, dir := range dirs {
		entries, err := sess.List(ctx, dir, 1)
		switch {
		case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrInvalid):
			continue // no such directory, or not one: no skills there
		case err != nil:
			return nil, nil, fmt.Errorf("listing skills in %s: %w", dir, err)
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
		for _, e := range entries {
			if e.Type == sandbox.TypeFile {
				continue
			}
			p := path.Join(e.Path, SkillFileName)
			text, err := readSkillFile(ctx, sess, p)
			switch {
			case errors.Is(err, sandbox.ErrNotFound):
				continue // a directory, not a skill
			case errors.Is(err, sandbox.ErrInvalid), errors.Is(err, sandbox.ErrPermission):
				// Report only real directories: a symlink here may
				// lead anywhere and was not necessarily meant as a skill.
				if e.Type == sandbox.TypeDir {
					skipped = append(skipped, SkippedSkill{Path: p, Reason: err.Error()})
				}
				continue
			case err != nil:
				return nil, nil, fmt.Errorf("reading skill %s: %w", p, err)
			}
			meta, _, err := parseFrontmatter(text)
			if err != nil {
				skipped = append(skipped, SkippedSkill{Path: p, Reason: err.Error()})
				continue
			}
			s := Skill{Name: meta["name"], Description: meta["description"], Path: p}
			if s.Name == "" {
				s.Name = e.Name
			}
			if s.Description == "" {
				s.Description = noDescription
			}
			if other, ok := taken[s.Name]; ok {
				skipped = append(skipped, SkippedSkill{Path: p, Reason: fmt.Sprintf("the name %q is already taken by %s", s.Name, other)})
				continue
			}
			taken[s.Name] = p
			skills = append(skills, s)
		}
	}
	sort.Slice(skills, func(i, j int) bool { return skills[i].Name < skills[j].Name })
	return skills, skipped, nil
}

func readSkillFile(ctx context.Context, sess sandbox.Session, p string) (string, error) {
	rc, err := sess.ReadFile(ctx, p)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxSkillBytes))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", p, err)
	}
	return string(data), nil
}

// parseFrontmatter splits a SKILL.md into its frontmatter fields and its
// body. It understands the YAML that skill files use in practice, without
// a YAML library: "key: value" with optional quotes, "#" comments, block
// scalars ("key: >" or "key: |" then indented lines) and plain values
// continued on indented lines. Nested keys and lists are kept as text.
// The errors say what to fix, as they end up in logs a person reads.
func parseFrontmatter(text string) (map[string]string, string, error) {
	text = strings.TrimPrefix(text, "\uFEFF")
	text = strings.ReplaceAll(text, "\r\n", "\n")
	lines := strings.Split(text, "\n")
	if strings.TrimSpace(lines[0]) != "---" {
		return nil, "", errors.New(`no frontmatter: SKILL.md must start with a "---" line, then "name: ..." and "description: ..." lines, then "---"`)
	}
	end := -1
	for i := 1; i < len(lines); i++ {
		if strings.TrimRight(lines[i], " \t") == "---" {
			end = i
			break
		}
	}
	if end < 0 {
		return nil, "", errors.New(`frontmatter is not closed: add a "---" line after the last "key: value" line`)
	}
	meta := map[string]string{}
	var key, block string // the key being continued, and its block style ("|", ">" or "" for plain)
	var cont []string
	flush := func() {
		if key == "" || len(cont) == 0 {
			return
		}
		sep := " "
		if block == "|" {
			sep = "\n"
		}
		v := strings.Join(cont, sep)
		if meta[key] != "" {
			v = meta[key] + " " + v
		}
		meta[key] = v
		cont = nil
	}
	for i, line := range lines[1:end] {
		n := i + 2 // 1-based line number in the file
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if key == "" {
				return nil, "", fmt.Errorf("frontmatter line %d: indented line %q continues no key", n, trimmed)
			}
			cont = append(cont, trimmed)
			continue
		}
		flush()
		k, v, ok := strings.Cut(line, ":")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, "", fmt.Errorf("frontmatter line %d: %q is not a \"key: value\" line", n, trimmed)
		}
		v = strings.TrimSpace(v)
		key, block = k, ""
		switch v {
		case "|", "|-", "|+":
			block, v = "|", ""
		case ">", ">-", ">+":
			block, v = ">", ""
		}
		meta[k] = unquote(v)
	}
	flush()
	body := strings.TrimLeft(strings.Join(lines[end+1:], "\n"), "\n")
	return meta, body, nil
}

// unquote strips YAML quotes: single quotes double themselves inside,
// double quotes take backslash escapes (Go's are a close superset).
func unquote(v string) string {
	if len(v) < 2 || v[0] != v[len(v)-1] {
		return v
	}
	switch v[0] {
	case '\'':
		return strings.ReplaceAll(v[1:len(v)-1], "''", "'")
	case '"':
		if s, err := strconv.Unquote(v); err == nil {
			return s
		}
		return v[1 : len(v)-1]
	}
	return v
}

// skillsSection is the skills index in the prompt: what each skill is for
// and where it is, and how to use one.
func skillsSection(skills []Skill) string {
	if len(skills) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("# Skills\n\n")
	b.WriteString("A skill is a folder of instructions for a kind of task: a SKILL.md, sometimes with scripts/, references/ and assets/ beside it. These skills are available, each with what it is for and the path of its SKILL.md:\n\n")
	for _, s := range skills {
		fmt.Fprintf(&b, "- %s: %s (%s)\n", s.Name, s.Description, s.Path)
	}
	b.WriteString(`
How to use them:
- Use a skill when the user names it (as $name or in words) or when the task clearly matches its description; use every skill that applies, the fewest that cover the task. Say in one line which skills you use. A skill applies to the turn it is asked for, not to later ones.
- Call ` + "`load_skill`" + ` with the skill's name to get its instructions and the list of its other files (or read the SKILL.md at the listed path). Read only what you need to follow it.
- Relative paths in a SKILL.md are relative to the skill's folder, not to your working directory. Run its scripts rather than retyping them, reuse its assets and templates, and open only the references the task needs.
- Keep the skill's files as they are unless the task is to change the skill; write your outputs in your working directory.
- If a skill is not listed or cannot be used (missing files, unclear steps), say so briefly and carry on the best way you can.`)
	return b.String()
}

// LoadSkill returns the load_skill tool over skills (as Skills found them):
// given {"skill_name": ...}, the Agents SDK's schema, it answers with the
// skill's SKILL.md body and the list of its other files, read when called.
// An unknown name is an error that lists the names there are.
//
// The SDK's load_skill copies a lazily sourced skill into the workspace;
// Cove's skills already live in the workspace, so here the tool reads one,
// which also serves models that have no shell.
func LoadSkill(sess sandbox.Session, skills []Skill) agent.Tool {
	return &loadSkillTool{sess: sess, skills: skills}
}

type loadSkillTool struct {
	sess   sandbox.Session
	skills []Skill
}

var _ agent.RiskAssessor = (*loadSkillTool)(nil)

// Risk implements agent.RiskAssessor: loading a skill only reads the
// workspace.
func (t *loadSkillTool) Risk(arguments, root string) (string, bool) { return "", false }

// maxSkillFiles bounds the file list load_skill returns.
const maxSkillFiles = 100

func (t *loadSkillTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name:        "load_skill",
		Description: "Load one skill from the skills list: returns the instructions in its SKILL.md and lists the other files in its folder (scripts, references, assets). Relative paths in the instructions are relative to that folder.",
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"skill_name": map[string]any{
					"type":        "string",
					"description": "The skill's name, as in the skills list.",
				},
			},
			"required":             []any{"skill_name"},
			"additionalProperties": false,
		},
		Strict: true,
	}
}

func (t *loadSkillTool) Call(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	var args struct {
		SkillName string `json:"skill_name"`
		Name      string `json:"name"` // a near miss models make; accepted
	}
	if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil {
		return agent.ToolResult{}, fmt.Errorf(`load_skill takes {"skill_name": "<name>"}: %v`, err)
	}
	name := strings.TrimSpace(strings.TrimPrefix(cmp.Or(args.SkillName, args.Name), "$"))
	s, ok := t.find(name)
	if !ok {
		return agent.ToolResult{}, t.unknown(name)
	}
	text, err := readSkillFile(ctx, t.sess, s.Path)
	if err != nil {
		return agent.ToolResult{}, fmt.Errorf("skill %q: %w", s.Name, err)
	}
	body := text
	if _, b, err := parseFrontmatter(text); err == nil {
		body = b
	}
	dir := path.Dir(s.Path)
	files, more, err := t.files(ctx, dir)
	if err != nil {
		return agent.ToolResult{}, fmt.Errorf("listing skill %q: %w", s.Name, err)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "# Skill: %s\n\nFolder: %s (relative paths below are relative to it)\n\n", s.Name, dir)
	b.WriteString(strings.TrimSpace(body))
	if len(text) >= maxSkillBytes {
		fmt.Fprintf(&b, "\n\n[SKILL.md is longer than %d bytes; read %s for the rest]", maxSkillBytes, s.Path)
	}
	if len(files) > 0 {
		b.WriteString("\n\n## Other files in this skill\n\n")
		for _, f := range files {
			fmt.Fprintf(&b, "- %s\n", f)
		}
		if more > 0 {
			fmt.Fprintf(&b, "- ... (%d more)\n", more)
		}
	}
	return agent.TextResult(strings.TrimRight(b.String(), "\n") + "\n"), nil
}

// find matches a skill by its name, or by its folder's name as the SDK
// also does.
func (t *loadSkillTool) find(name string) (Skill, bool) {
	for _, s := range t.skills {
		if s.Name == name {
			return s, true
		}
	}
	for _, s := range t.skills {
		if path.Base(path.Dir(s.Path)) == name {
			return s, true
		}
	}
	return Skill{}, false
}

func (t *loadSkillTool) unknown(name string) error {
	if len(t.skills) == 0 {
		return fmt.Errorf("no skill named %q: this workspace has no skills", name)
	}
	names := make([]string, len(t.skills))
	for i, s := range t.skills {
		names[i] = s.Name
	}
	return fmt.Errorf("no skill named %q; the skills are: %s", name, strings.Join(names, ", "))
}

// files lists the skill folder's files (not SKILL.md) relative to it, a
// few levels deep, at most maxSkillFiles of them; more counts the rest.
func (t *loadSkillTool) files(ctx context.Context, dir string) (files []string, more int, err error) {
	infos, err := t.sess.List(ctx, dir, 4)
	if err != nil {
		return nil, 0, err
	}
	for _, fi := range infos {
		rel, ok := relTo(dir, fi.Path)
		if !ok || rel == SkillFileName || fi.Type == sandbox.TypeDir {
			continue
		}
		files = append(files, rel)
	}
	sort.Strings(files)
	if len(files) > maxSkillFiles {
		more = len(files) - maxSkillFiles
		files = files[:maxSkillFiles]
	}
	return files, more, nil
}
