package server

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/cove-sandbox/cove/api"
)

// termRows is the expression of the terminal's screen rows as JSON: the
// text of each row of the live screen, trailing blanks removed.
const termRows = `JSON.stringify([...document.querySelectorAll('#terminal .term-screen > span')].map((e) => e.textContent.replace(/\s+$/, '')))`

// term drives the web terminal of a sandbox page.
type term struct {
	b *browser
}

// keys types s into the terminal as key presses (kb names special keys).
func (tm term) keys(s string) {
	tm.b.t.Helper()
	tm.b.do("typing "+js(s)+" in the terminal", chromedp.SendKeys(chromedp.CSS("#terminal"), s))
}

// waitRows waits until cond, an expression over rows (the screen's rows
// as strings) and hist (the scrollback element), holds.
func (tm term) waitRows(what, cond string) {
	tm.b.t.Helper()
	tm.b.wait(what, `((rows, hist) => `+cond+`)(JSON.parse(`+termRows+`), document.querySelector('#terminal .term-history'))`)
}

// rows is the screen as it is now.
func (tm term) rows() []string {
	tm.b.t.Helper()
	var rows []string
	if err := json.Unmarshal([]byte(tm.b.eval(termRows)), &rows); err != nil {
		tm.b.t.Fatal(err)
	}
	return rows
}

// prompted waits for the shell's prompt ("$", set by the test) on the
// last row with text.
func (tm term) prompted(what string) {
	tm.b.t.Helper()
	tm.waitRows(what, `rows.filter((r) => r !== '').pop() === '$'`)
}

// TestUIBrowserTerminal: full-screen programs work in the web terminal:
// cursor addressing and colours from printf, clear, less (its first
// page, arrows, PgDn, G, and q back to the shell with the screen as it
// was), top, and vi writing a file.
func TestUIBrowserTerminal(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "term")
	sb := ts.create(t, key, api.CreateSandbox{})
	b := newBrowser(t, ts.URL)
	b.signIn(key)
	b.open("#/sandboxes/" + sb.ID)
	b.click("#tab-terminal")
	b.click("#term-connect")
	b.waitText(".term-panel [role=status]", "Connected")
	tm := term{b}
	tm.keys("export TERM=xterm-256color PS1='$ '; cd /tmp\r")
	tm.prompted("the prompt")

	// Cursor addressing and erase: text put at row 4, column 6 of a
	// cleared screen; 256 colours and 24-bit colour as inline colours.
	tm.keys(`printf '\033[2J\033[4;6Hplaced\033[4;9H\033[1X\033[6;1H'` + "\r")
	tm.waitRows("text at row 4, column 6", `rows[3] === '     pla ed'`)
	tm.keys(`printf '\033[38;5;196mC256\033[0m \033[48;2;10;20;30mTRUE\033[0m\n'` + "\r")
	tm.prompted("the colours printed")
	span := func(text string) string {
		return `[...document.querySelectorAll('#terminal .term-screen span span')].find((e) => e.textContent === ` + js(text) + `)`
	}
	if got := b.eval(`getComputedStyle(` + span("C256") + `).color`); got != "rgb(255, 0, 0)" {
		t.Errorf("colour 196 of 256: got %s, want rgb(255, 0, 0)", got)
	}
	if got := b.eval(`getComputedStyle(` + span("TRUE") + `).backgroundColor`); got != "rgb(10, 20, 30)" {
		t.Errorf("a 24-bit background: got %s, want rgb(10, 20, 30)", got)
	}
	b.screenshot("terminal-printf")

	// A key typed redraws the cursor's row only: the other rows' elements
	// stay as they were.
	b.eval(`document.querySelectorAll('#terminal .term-screen > span').forEach((e) => { e.kept = true; })`)
	tm.keys("x")
	tm.waitRows("the key echoed", `rows.filter((r) => r !== '').pop() === '$ x'`)
	if got, want := b.eval(`[...document.querySelectorAll('#terminal .term-screen > span')].filter((e) => !e.kept).length`), "1"; got != want {
		t.Errorf("rows drawn again for one key: %s, want %s", got, want)
	}
	tm.keys(kb.Backspace)
	tm.prompted("the key erased")

	// Output scrolls into the scrollback; clear empties the screen and
	// the scrollback.
	tm.keys("seq 1 100\r")
	tm.waitRows("the scrollback", `rows.includes('100') && [...hist.children].some((e) => e.textContent === '1\n')`)
	tm.keys("clear\r")
	tm.waitRows("a cleared screen", `rows[0] === '$' && rows.slice(1).every((r) => r === '') && hist.childElementCount === 0`)

	// less: the first page on the alternate screen, the arrow and PgDn
	// keys, G to the end, and q back to the shell as it was.
	tm.keys("seq 1 200 > f; less f\r")
	tm.waitRows("less's first page", `rows[0] === '1' && rows[rows.length - 2] === String(rows.length - 1) && hist.hidden`)
	rows := tm.rows()
	b.screenshot("terminal-less")
	tm.keys(kb.ArrowDown)
	tm.waitRows("less one line down", `rows[0] === '2'`)
	// The wheel on the alternate screen sends three arrows.
	b.eval(`document.querySelector('#terminal').dispatchEvent(new WheelEvent('wheel', {deltaY: 120, bubbles: true, cancelable: true}))`)
	tm.waitRows("less three lines down by the wheel", `rows[0] === '5'`)
	tm.keys(kb.PageDown)
	tm.waitRows("less one page down", `rows[0] === `+js(strconv.Itoa(len(rows)+4)))
	tm.keys("G")
	tm.waitRows("less at the end", `rows[rows.length - 2] === '200' && rows[rows.length - 1].includes('(END)')`)
	tm.keys("q")
	tm.waitRows("the shell's screen back", `rows[0] === '$ seq 1 200 > f; less f' && rows[1] === '$' && rows.slice(2).every((r) => r === '') && !hist.hidden`)
	b.screenshot("terminal-after-less")

	// top: its header, and q quits to the shell.
	tm.keys("top\r")
	tm.waitRows("top's header", `rows.some((r) => r.includes('load average')) && rows.some((r) => r.startsWith('Tasks'))`)
	b.screenshot("terminal-top")
	if n := b.eval(`document.querySelectorAll('#terminal .cursor').length`); n != "0" {
		t.Errorf("top hides the cursor, but %s cursors are drawn", n)
	}
	tm.keys("q")
	// top leaves its last screen above the prompt, as in xterm, and shows
	// the cursor again.
	tm.prompted("the shell after top")
	b.wait("the cursor shown again", `document.querySelectorAll('#terminal .cursor').length === 1`)

	// vi: insert text, Esc, :wq; the file has it.
	tm.keys("vi g.txt\r")
	tm.waitRows("vi's empty buffer", `rows.filter((r) => r === '~').length > 3`)
	tm.keys("ihello from vi" + kb.Escape + ":wq\r")
	tm.prompted("the shell after vi")
	tm.keys("cat g.txt\r")
	tm.waitRows("the file vi wrote", `rows.includes('hello from vi')`)
	b.screenshot("terminal-vi")
}

// TestUITerminalScreen runs the screen model's unit tests
// (testdata/terminal/screen.test.mjs) in node against server/ui's
// screen.js and ansi.js: each sequence and key the browser test does not
// reach by a program.
func TestUITerminalScreen(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed (scripts/deps.sh installs it)")
	}
	dir := t.TempDir()
	for src, dst := range map[string]string{
		"ui/screen.js": "screen.js", "ui/ansi.js": "ansi.js", "testdata/terminal/screen.test.mjs": "screen.test.mjs",
	} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The UI's modules are ES modules served as .js.
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"type": "module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--test", "--test-reporter=spec", "screen.test.mjs")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test screen.test.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
