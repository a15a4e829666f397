package applypatch

import (
	"fmt"
	"strings"
)

// diffContext is the number of unchanged lines shown around a change, as
// diff -u and git show.
const diffContext = 3

func addScript(lines []string) []edit {
	s := make([]edit, len(lines))
	for i, l := range lines {
		s[i] = edit{'+', l}
	}
	return s
}

func deleteScript(lines []string) []edit {
	s := make([]edit, len(lines))
	for i, l := range lines {
		s[i] = edit{'-', l}
	}
	return s
}

// unifiedDiff writes script, the edit from oldLines to newLines, as a
// unified diff. The diff is not computed but taken from the patch's own
// edits, so it shows exactly what the patch did. It returns "" when nothing
// changed and the names are the same.
//
// oldNL and newNL say whether each side's last line ends with a newline; a
// last line without one is marked "\ No newline at end of file", and differs
// from the same text with one, as in diff -u.
func unifiedDiff(oldName, newName string, oldLines []string, oldNL bool, newLines []string, newNL bool, script []edit) string {
	type line struct {
		edit
		oldNo, newNo int // 0-based line numbers on each side, -1 if absent
	}
	var ls []line
	o, n := 0, 0
	for _, e := range script {
		switch e.kind {
		case '=':
			// A kept last line that gains or loses its newline changed.
			oldEnd := o == len(oldLines)-1 && !oldNL
			newEnd := n == len(newLines)-1 && !newNL
			if oldEnd != newEnd {
				ls = append(ls, line{edit{'-', e.text}, o, -1}, line{edit{'+', e.text}, -1, n})
			} else {
				ls = append(ls, line{e, o, n})
			}
			o++
			n++
		case '-':
			ls = append(ls, line{e, o, -1})
			o++
		case '+':
			ls = append(ls, line{e, -1, n})
			n++
		}
	}

	var b strings.Builder
	header := func() {
		if b.Len() == 0 {
			fmt.Fprintf(&b, "--- %s\n+++ %s\n", oldName, newName)
		}
	}
	if strings.TrimPrefix(oldName, "a/") != strings.TrimPrefix(newName, "b/") {
		// A move, or an empty file added or deleted, shows even with no
		// lines changed.
		header()
	}
	for i := 0; i < len(ls); {
		if ls[i].kind == '=' {
			i++
			continue
		}
		// A hunk runs from diffContext lines before this change to
		// diffContext lines after the last change that is no more than
		// 2*diffContext unchanged lines from the one before it.
		start := max(0, i-diffContext)
		end := i
		for j := i; j < len(ls); j++ {
			if ls[j].kind != '=' {
				end = j
			} else if j-end > 2*diffContext {
				break
			}
		}
		stop := min(len(ls), end+diffContext+1)

		oldStart, oldCount, newStart, newCount := -1, 0, -1, 0
		for _, l := range ls[start:stop] {
			if l.oldNo >= 0 {
				if oldStart < 0 {
					oldStart = l.oldNo
				}
				oldCount++
			}
			if l.newNo >= 0 {
				if newStart < 0 {
					newStart = l.newNo
				}
				newCount++
			}
		}
		// An empty side is numbered by the line before it.
		if oldStart < 0 {
			oldStart = lineBefore(ls[:start], func(l line) int { return l.oldNo })
		}
		if newStart < 0 {
			newStart = lineBefore(ls[:start], func(l line) int { return l.newNo })
		}
		header()
		fmt.Fprintf(&b, "@@ -%s +%s @@\n", diffRange(oldStart, oldCount), diffRange(newStart, newCount))
		for _, l := range ls[start:stop] {
			prefix := byte(' ')
			if l.kind != '=' {
				prefix = l.kind
			}
			b.WriteByte(prefix)
			b.WriteString(l.text)
			b.WriteByte('\n')
			if (l.oldNo == len(oldLines)-1 && l.oldNo >= 0 && !oldNL) || (l.newNo == len(newLines)-1 && l.newNo >= 0 && !newNL) {
				b.WriteString("\\ No newline at end of file\n")
			}
		}
		i = stop
	}
	return b.String()
}

// lineBefore returns the count of lines on one side before a hunk, which is
// the number diff gives an empty range.
func lineBefore[L any](before []L, no func(L) int) int {
	for i := len(before) - 1; i >= 0; i-- {
		if n := no(before[i]); n >= 0 {
			return n + 1
		}
	}
	return 0
}

// diffRange writes a hunk range: 1-based start, and the count unless it is 1.
// An empty range is numbered by the line before it, so its start is as
// given.
func diffRange(start, count int) string {
	switch count {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, count)
}
