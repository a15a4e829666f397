package server

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"

	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/agent/model/fake"

	"github.com/chromedp/chromedp"

	"github.com/cove-sandbox/cove/api"
)

// The console's big output: 1 MB of output is shown to its last line,
// the view follows the end unless the user scrolled up, and the page
// holds a bounded number of nodes whatever the size of the output.

// bigOutput prints 170,000 numbered lines: 1,078,895 bytes (over 1 MiB).
const bigOutput = `seq 1 170000`

// consoleLastLine is the condition that the last console entry shows
// the last line of bigOutput and its exit status.
const consoleLastLine = `(() => { const e = document.querySelector('#console-log .entry:last-child');
  return !!e && e.querySelector('.status').textContent.includes('exit 0') &&
    (e.querySelector('.out')?.textContent ?? '').endsWith('\n170000\n'); })()`

// openConsole signs in and opens a new sandbox's page with its console;
// it returns the key and the sandbox.
func openConsole(t testing.TB, ts *testServer, b *browser) (string, api.Sandbox) {
	t.Helper()
	key := ts.teamKey(t, "console")
	sb := ts.create(t, key, api.CreateSandbox{})
	b.signIn(key)
	b.open("#/sandboxes/" + sb.ID)
	b.wait("the console", `!!document.querySelector('#cmd')`)
	return key, sb
}

// BenchmarkUIConsole1MB times, in the page, from the click on Run to the
// last line of 1 MB of output shown (the command, the stream and the
// rendering): ms/show is the figure.
func BenchmarkUIConsole1MB(bm *testing.B) {
	ts := newTestServer(bm, Config{})
	b := newBrowser(bm, ts.URL)
	openConsole(bm, ts, b)
	var total time.Duration
	n := 0
	for bm.Loop() {
		b.eval(`document.querySelector('#console-log').replaceChildren()`)
		b.fill("#cmd", bigOutput)
		b.eval(`document.querySelector('#run').addEventListener('click', () => { window.coveT0 = performance.now(); }, {once: true})`)
		b.click("#run")
		b.do("the last line", chromedp.Poll[chromedp.Void](`(`+consoleLastLine+`) && (window.coveT1 = performance.now())`,
			chromedp.WithPollingTimeout(60*time.Second)))
		ms := b.eval(`window.coveT1 - window.coveT0`)
		d, err := time.ParseDuration(strings.TrimSpace(ms) + "ms")
		if err != nil {
			bm.Fatalf("the page's figure %q: %v", ms, err)
		}
		total += d
		n++
	}
	bm.ReportMetric(float64(total.Milliseconds())/float64(n), "ms/show")
}

// seqBytes is the size of `seq 1 n`'s output.
func seqBytes(n int) int {
	size := 0
	for i := 1; i <= n; i++ {
		size += len(strconv.Itoa(i)) + 1
	}
	return size
}

// viewAtEnd is the condition that the output view in sel is scrolled to
// its end and its last row is in sight.
func viewAtEnd(sel string) string {
	return `(() => { const v = document.querySelector(` + js(sel+" .vout-scroll") + `);
  const rows = v.querySelectorAll('.vout-row'); const last = rows[rows.length - 1];
  return v.scrollTop + v.clientHeight >= v.scrollHeight - 2 &&
    last.getBoundingClientRect().bottom <= v.getBoundingClientRect().bottom + 1; })()`
}

// TestUIBrowserConsoleBigOutput: 1 MB of output in the console shows its
// last line, scrolled to the end, in a bounded number of nodes, says how
// many earlier lines it does not show and downloads the whole output;
// the page answers meanwhile. Scrolled up, the view stays where the
// user put it while output goes on.
func TestUIBrowserConsoleBigOutput(t *testing.T) {
	ts := newTestServer(t, Config{})
	b := newBrowser(t, ts.URL)
	key, sb := openConsole(t, ts, b)

	b.fill("#cmd", bigOutput)
	b.click("#run")
	if got := b.eval(`1 + 1`); got != "2" {
		t.Fatalf("the page while the output streams: %q", got)
	}
	b.wait("the last line", consoleLastLine)
	entry := "#console-log .entry:last-child"
	b.wait("the view at its end", viewAtEnd(entry))
	b.screenshot("big-output")
	if n, _ := strconv.Atoi(b.eval(`document.querySelectorAll('#console-log *').length`)); n == 0 || n > 400 {
		t.Errorf("the console holds %d elements for 170,000 lines, want a bounded number (at most 400)", n)
	}
	if got := b.eval(`document.querySelector('#console-log').lastElementChild.querySelector('.vout-rows').firstElementChild.textContent`); got == "1\n" {
		t.Errorf("the first line is drawn at the end of 170,000 lines")
	}

	// The notice: how many lines are not shown, and the download.
	notice := b.eval(textOf(entry + " .vout-dropped"))
	m := regexp.MustCompile(`^([\d,]+) earlier lines are not shown \(the view keeps the last ([\d,]+)\)`).FindStringSubmatch(notice)
	if m == nil {
		t.Fatalf("the dropped-lines notice: %q", notice)
	}
	dropped, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
	kept, _ := strconv.Atoi(strings.ReplaceAll(m[2], ",", ""))
	if dropped+kept != 170000 || kept < 9000 {
		t.Errorf("the notice: %d dropped + %d kept, want 170,000 lines with at least 9,000 kept", dropped, kept)
	}
	b.eval(`(() => { const real = URL.createObjectURL; URL.createObjectURL = (blob) => { window.coveDownload = blob; return real(blob); }; })()`)
	b.click(entry + " .vout-dropped button")
	b.wait("the download", `!!window.coveDownload`)
	if got, want := b.eval(`window.coveDownload.size`), strconv.Itoa(seqBytes(170000)); got != want {
		t.Errorf("the download has %s bytes, want %s (the whole output)", got, want)
	}

	// Scrolled up while a command prints, the view stays put; back at the
	// end, it follows again.
	b.fill("#cmd", `for i in $(seq 1 300); do echo line $i; sleep 0.01; done`)
	b.click("#run")
	b.waitText(entry+" .out", "line 60\n")
	b.wait("the view following the end", viewAtEnd(entry))
	b.eval(`document.querySelector(` + js(entry+" .vout-scroll") + `).scrollTop = 0`)
	b.waitText(entry+" .status", "exit 0")
	if top := b.eval(`document.querySelector(` + js(entry+" .vout-scroll") + `).scrollTop`); top != "0" {
		t.Errorf("scrolled up, the view moved to %s px while output came", top)
	}
	b.waitText(entry+" .vout-rows", "line 1\n")
	// More lines than drawn: a copy of the page would miss some, so the
	// download is offered.
	b.waitText(entry+" .vout-dropped", "300 lines.")
	b.screenshot("scrolled-up")
	// The way back: a button to the end, which follows again.
	b.click(entry + " .vout-jump")
	b.wait("the view at its end after the jump", viewAtEnd(entry)+` && `+textOf(entry+" .vout-rows")+`.endsWith('line 300\n')`)
	b.wait("the jump button gone", `document.querySelector(`+js(entry+" .vout-jump")+`).hidden`)

	// Scrolled up when earlier lines are dropped, the lines read stay in
	// sight: 10,400 lines, the reader goes to line 5,000, then 600 more
	// lines (the command waits for a file the test makes) drop 1,000.
	b.fill("#cmd", `seq 1 10400; while [ ! -e go-on ]; do sleep 0.05; done; seq 10401 11000`)
	b.click("#run")
	b.waitText(entry+" .vout-rows", "\n10400\n")
	scroller := `document.querySelector(` + js(entry+" .vout-scroll") + `)`
	topRow := `(() => { const v = ` + scroller + `; const r = v.getBoundingClientRect();
  return document.elementFromPoint(r.left + 20, r.top + 4)?.closest('.vout-row')?.textContent ?? ''; })()`
	b.eval(`(() => { const v = ` + scroller + `; v.scrollTop = 4999 * v.querySelector('.vout-row').getBoundingClientRect().height; })()`)
	b.wait("line 5000 at the top", topRow+` === '5000\n'`)
	ts.exec(t, key, sb.ID, "touch go-on")
	b.waitText(entry+" .status", "exit 0")
	b.waitText(entry+" .vout-dropped", "earlier lines are not shown")
	if got := b.eval(topRow); got != "5000\n" {
		t.Errorf("earlier lines dropped while scrolled up: the top row is %q, want the line read, 5000", got)
	}
	b.screenshot("dropped-while-reading")

	b.fill("#cmd", `for i in $(seq 1 200); do echo more $i; sleep 0.01; done`)
	b.click("#run")
	b.waitText(entry+" .out", "more 60\n")
	b.eval(`(() => { const v = document.querySelector(` + js(entry+" .vout-scroll") + `); v.scrollTop = 0; })()`)
	b.waitText(entry+" .vout-rows", "more 1\n")
	b.eval(`(() => { const v = document.querySelector(` + js(entry+" .vout-scroll") + `); v.scrollTop = v.scrollHeight; })()`)
	b.waitText(entry+" .status", "exit 0")
	b.wait("the view back at its end", viewAtEnd(entry)+` && `+textOf(entry+" .out")+`.endsWith('more 200\n')`)
}

// TestUIBrowserChatBigOutput: a command of the agent printing 12,000
// lines shows the last of them in its card, in a bounded number of
// nodes, and says how many earlier lines it does not show.
func TestUIBrowserChatBigOutput(t *testing.T) {
	model := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"seq 1 12000"}`),
		fake.Text("Counted."),
	)
	ts := newTestServer(t, Config{Model: ModelConfig{BaseURL: model.URL, APIKey: "sk-test", DefaultModel: "gpt-5.1"}})
	key := ts.teamKey(t, "chat")
	sb := ts.create(t, key, api.CreateSandbox{})
	b := newBrowser(t, ts.URL)
	b.signIn(key)
	b.open("#/chat?sandbox=" + sb.ID)
	b.wait("the workspace picked", `document.querySelector('#workspace').value === `+js(sb.ID))
	b.fill("#task", "Count to 12000.")
	b.click("#start-run")
	b.waitText("#timeline .event.final", "Counted.")
	card := "#timeline .event.call"
	b.wait("the last line in the card", textOf(card+" .out")+`.endsWith('\n12000\n')`)
	b.wait("the card's view at its end", viewAtEnd(card))
	if n, _ := strconv.Atoi(b.eval(`document.querySelectorAll(` + js(card+" *") + `).length`)); n == 0 || n > 400 {
		t.Errorf("the card holds %d elements for 12,000 lines, want at most 400", n)
	}
	b.waitText(card+" .vout-dropped", "earlier lines are not shown")
	b.screenshot("chat-big-output")
}

// BenchmarkUIOutputView1MB times the view alone in the page: 1 MiB of
// output (bigOutput's 170,000 lines) written in 16 KiB chunks, then
// drawn and laid out. ms/render is the figure.
func BenchmarkUIOutputView1MB(bm *testing.B) {
	ts := newTestServer(bm, Config{})
	b := newBrowser(bm, ts.URL)
	b.open("#/signin")
	b.wait("the page", `!!document.querySelector('main')`)
	var total float64
	n := 0
	for bm.Loop() {
		ms, err := chromedp.Run(b.ctx, chromedp.Evaluate[float64](`(async () => {
  const {OutputView} = await import('/ui/outview.js');
  document.querySelectorAll('.vout').forEach((e) => e.remove());
  let s = ''; for (let i = 1; i <= 170000; i++) s += i + '\n';
  const v = new OutputView(); document.querySelector('main').append(v.el);
  const t0 = performance.now();
  for (let i = 0; i < s.length; i += 16384) v.write(s.slice(i, i + 16384));
  v.render(); void v.scroller.scrollHeight;
  if (!v.rows.lastElementChild.textContent.endsWith('170000\n')) throw new Error('the last line is not drawn');
  return performance.now() - t0; })()`, chromedp.EvalAsValue, chromedp.EvalAwaitPromise))
		if err != nil {
			bm.Fatal(err)
		}
		total += ms
		n++
	}
	bm.ReportMetric(total/float64(n), "ms/render")
}

// TestUIOutputViewModel runs the output view's unit tests
// (testdata/outview.test.mjs) with node: lines, \r, colours split across
// chunks, the bounds and the download.
func TestUIOutputViewModel(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed (scripts/deps.sh installs it)")
	}
	out, err := exec.Command("node", "--test", "--test-reporter=spec", filepath.Join("testdata", "outview.test.mjs")).CombinedOutput()
	if err != nil {
		t.Fatalf("node --test testdata/outview.test.mjs: %v\n%s", err, out)
	}
}
