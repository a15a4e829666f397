package server

import (
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/api"
)

// The agent's messages and answers are Markdown from a model, which
// reads whatever a sandbox or a web page shows it: they are rendered
// (headings, lists, code, tables, links) and they are hostile (no HTML,
// no script, no link that runs or loads anything).

// mdAnswer is a final answer with the usual Markdown and a hostile part.
const mdAnswer = "## Results\n\n" +
	"The script **worked** and *printed* `primes.txt`.\n\n" +
	"- first\n- second\n  - nested one\n  - nested two\n- third\n\n" +
	"1. build\n2. test\n\n" +
	"```python\nprint([p for p in range(10) if p < 5])\n```\n\n" +
	"| City | People |\n|:-----|-------:|\n| Paris | 2,100,000 |\n| Lyon | 520,000 |\n\n" +
	"> a quoted line\n\n---\n\n" +
	"See [the docs](https://example.com/docs) and https://example.org/x.\n\n" +
	"### The hostile part\n\n" +
	"<script>window.pwned=1</script>\n\n" +
	"<img src=x onerror=\"window.pwned=1\">\n\n" +
	"[click me](javascript:window.pwned=1) and [data](data:text/html,<script>parent.pwned=1</script>) " +
	"and [tabbed](<java\tscript:window.pwned=1>) and [entity](&#106;avascript:window.pwned=1) and <javascript:window.pwned=1>\n\n" +
	"<iframe src=\"javascript:parent.pwned=1\"></iframe>\n\n" +
	"![tracker](https://evil.example/pixel.png) <a href=\"javascript:window.pwned=1\" onclick=\"window.pwned=1\">raw</a>\n"

// TestUIBrowserMarkdown: a run whose message and final answer are
// Markdown shows them rendered, and the hostile part of the answer stays
// text: no element, attribute or link from it can run script.
func TestUIBrowserMarkdown(t *testing.T) {
	model := fake.NewServer(t,
		fake.Reply(fake.Text("Plan:\n\n1. **look** around\n2. run `ls`"), fake.Call("exec_command", `{"cmd":"ls"}`)),
		fake.Text(mdAnswer),
	)
	ts := newTestServer(t, Config{Model: ModelConfig{BaseURL: model.URL, APIKey: "sk-test", DefaultModel: "gpt-5.1"}})
	key := ts.teamKey(t, "markdown")
	sb := ts.create(t, key, api.CreateSandbox{})
	b := newBrowser(t, ts.URL)
	b.signIn(key)
	var run api.Run
	ts.must(t, 201, "POST", "/v1/runs", key, api.CreateRun{Input: "find primes", SandboxID: sb.ID, Agent: api.RunAgent{Approval: "never"}}, &run)
	b.open("#/runs/" + run.ID)

	// The message before the command: a list with strong and code.
	b.waitText("#timeline .msg.assistant .text.md ol li strong", "look")
	b.waitText("#timeline .msg.assistant .text.md ol li code", "ls")

	// The final answer, rendered.
	const answer = "#timeline .event.final .answer"
	b.waitText(answer+" h2", "Results")
	b.waitText("#run-status", "idle")
	checkRenderedAnswer(t, b, answer)
	checkHostileInert(t, b, answer)
	b.screenshot("markdown")

	// The answer replaced the message that carried it: shown once.
	if n := b.eval(`document.querySelectorAll('#timeline .event.final h2').length + document.querySelectorAll('#timeline .msg.assistant h2').length`); n != "1" {
		t.Errorf("the answer's heading shows %s times, want 1", n)
	}

	// Replayed on a new visit: the same.
	b.open("#/chat")
	b.open("#/runs/" + run.ID)
	b.waitText(answer+" h2", "Results")
	checkRenderedAnswer(t, b, answer)
	checkHostileInert(t, b, answer)
}

// checkRenderedAnswer: the answer's Markdown made the elements it says.
func checkRenderedAnswer(t *testing.T, b *browser, answer string) {
	t.Helper()
	q := func(sel string) string { return js(answer + " " + sel) }
	for _, c := range []struct{ what, expr, want string }{
		{"strong", textOf(answer + " p strong"), "worked"},
		{"em", textOf(answer + " p em"), "printed"},
		{"inline code", textOf(answer + " p code"), "primes.txt"},
		{"list items", `document.querySelectorAll(` + q("ul > li") + `).length`, "5"},
		{"nested items", `[...document.querySelectorAll(` + q("ul ul > li") + `)].map((e) => e.textContent).join('|')`, "nested one|nested two"},
		{"ordered items", `document.querySelectorAll(` + q("ol > li") + `).length`, "2"},
		{"code block", textOf(answer + " pre code.language-python"), "print([p for p in range(10) if p < 5])\n"},
		{"table header", `[...document.querySelectorAll(` + q("table th") + `)].map((e) => e.textContent).join('|')`, "City|People"},
		{"table cells", `[...document.querySelectorAll(` + q("table td") + `)].map((e) => e.textContent).join('|')`, "Paris|2,100,000|Lyon|520,000"},
		{"right-aligned column", `document.querySelector(` + q("table td:nth-child(2)") + `).className`, "align-right"},
		{"quote", textOf(answer + " blockquote"), "a quoted line"},
		{"rule", `document.querySelectorAll(` + q("hr") + `).length`, "1"},
		{"link", `(() => { const a = document.querySelector(` + q(`a[href^="https://example.com"]`) + `); return [a.textContent, a.href, a.target, a.rel].join('|'); })()`,
			"the docs|https://example.com/docs|_blank|noopener noreferrer"},
		{"bare URL", textOf(answer + ` a[href="https://example.org/x"]`), "https://example.org/x"},
		{"h3", textOf(answer + " h3"), "The hostile part"},
	} {
		if got := b.eval(c.expr); got != c.want {
			t.Errorf("%s: got %q, want %q", c.what, got, c.want)
		}
	}
}

// checkHostileInert: nothing of the answer's hostile part became an
// element, an attribute or a link that runs or loads anything, before
// and after clicking what was meant as links; it all shows as text.
func checkHostileInert(t *testing.T, b *browser, answer string) {
	t.Helper()
	q := js(answer)
	inert := func(when string) {
		t.Helper()
		for _, c := range []struct{ what, expr, want string }{
			{"window.pwned", `typeof window.pwned`, "undefined"},
			{"dangerous elements in the answer", `document.querySelectorAll(` + js(answer+" :is(script, iframe, img, object, embed, svg, style, form, input, link, meta, base, video, audio, source)") + `).length`, "0"},
			{"elements other than Markdown's", `[...document.querySelector(` + q + `).querySelectorAll('*')].map((e) => e.localName)` +
				`.filter((n) => !'h1 h2 h3 h4 h5 h6 p br hr em strong del code pre blockquote ul ol li table thead tbody tr th td div a span'.split(' ').includes(n)).join(',')`, ""},
			{"attributes other than Markdown's", `[...document.querySelector(` + q + `).querySelectorAll('*')].flatMap((e) => [...e.attributes].map((a) => a.name))` +
				`.filter((n) => !['href', 'title', 'class', 'start', 'target', 'rel'].includes(n)).join(',')`, ""},
			{"links that are not http(s) or mailto", `[...document.querySelector(` + q + `).querySelectorAll('a')].map((a) => a.href)` +
				`.filter((h) => !/^(https?|mailto):/.test(h)).join(' ')`, ""},
			{"links without noopener", `[...document.querySelector(` + q + `).querySelectorAll('a')].filter((a) => a.rel !== 'noopener noreferrer' || a.target !== '_blank').length`, "0"},
			{"scripts in the page not the app's", `[...document.scripts].filter((s) => !new URL(s.src || 'x:', location.href).pathname.startsWith('/ui/')).length`, "0"},
			{"frames in the page", `document.querySelectorAll('iframe, frame, object, embed').length`, "0"},
		} {
			if got := b.eval(c.expr); got != c.want {
				t.Errorf("%s: %s: got %q, want %q", when, c.what, got, c.want)
			}
		}
	}
	inert("rendered")
	text := b.eval(textOf(answer))
	for _, want := range []string{"<script>window.pwned=1</script>", `<img src=x onerror="window.pwned=1">`, `<iframe src="javascript:parent.pwned=1"></iframe>`, "<javascript:window.pwned=1>", "click me", "tracker"} {
		if !strings.Contains(text, want) {
			t.Errorf("the answer does not show %q as text:\n%s", want, text)
		}
	}
	// What the model meant as links: a click does nothing (the blocked
	// ones are not links; the image is a link, never loaded).
	hash := b.eval(`location.hash`)
	b.eval(`[...document.querySelector(` + q + `).querySelectorAll('.md-blocked')].forEach((e) => e.click())`)
	if n := b.eval(`document.querySelector(` + q + `).querySelectorAll('.md-blocked').length`); n != "4" {
		t.Errorf("%s blocked links, want 4 (javascript:, data:, tab-split and entity-encoded javascript:)", n)
	}
	if got := b.eval(`location.hash`); got != hash {
		t.Errorf("clicking the blocked links moved the page to %s", got)
	}
	if got := b.eval(textOf(answer + ` a[href="https://evil.example/pixel.png"]`)); !strings.Contains(got, "tracker") {
		t.Errorf("the image is not a link to it: %q", got)
	}
	inert("after clicking the links")
}

// TestUIMarkdownRender: markdown.js's output for each construct, read
// from the DOM it builds in the browser.
func TestUIMarkdownRender(t *testing.T) {
	ts := newTestServer(t, Config{})
	b := newBrowser(t, ts.URL)
	b.open("")
	b.eval(`import('/ui/markdown.js').then((m) => { window.md = m; })`)
	b.wait("the module", `!!window.md`)
	render := func(src string) string {
		return b.eval(`(() => { const d = document.createElement('div'); d.append(window.md.renderMarkdown(` + js(src) + `)); return d.innerHTML; })()`)
	}
	const ln = ` target="_blank" rel="noopener noreferrer"`
	const blocked = `<span class="md-blocked" title="not a link: links here go only to http(s) and mailto addresses">`
	for _, c := range []struct{ name, src, want string }{
		{"heading levels", "# One\n###### Six ##", "<h1>One</h1><h6>Six</h6>"},
		{"not a heading", "#hashtag", "<p>#hashtag</p>"},
		{"setext", "Title\n=====\nSub\n---", "<h1>Title</h1><h2>Sub</h2>"},
		{"paragraphs and breaks", "one\ntwo\n\nthree", "<p>one<br>two</p><p>three</p>"},
		{"emphasis", "*a* _b_ **c** __d__ ~~e~~ ***f***", "<p><em>a</em> <em>b</em> <strong>c</strong> <strong>d</strong> <del>e</del> <em><strong>f</strong></em></p>"},
		{"nested emphasis", "**bold *and em* here**", "<p><strong>bold <em>and em</em> here</strong></p>"},
		{"intraword underscores", "snake_case_name", "<p>snake_case_name</p>"},
		{"unmatched", "2 * 3 * 4 and a*", "<p>2 * 3 * 4 and a*</p>"},
		{"code span", "`a < b` and ``x ` y``", "<p><code>a &lt; b</code> and <code>x ` y</code></p>"},
		{"no markup in code", "`**not bold** [x](https://x)`", "<p><code>**not bold** [x](https://x)</code></p>"},
		{"escapes", `\*not em\* \# \[x\](y)`, "<p>*not em* # [x](y)</p>"},
		{"entities", "&amp; &lt;b&gt; &#65; &copy; &bogus;", "<p>&amp; &lt;b&gt; A © &amp;bogus;</p>"},
		{"fenced code", "```sh\necho <b>&amp;\n```", `<pre><code class="language-sh">echo &lt;b&gt;&amp;amp;` + "\n</code></pre>"},
		{"tilde fence, unclosed", "~~~\nx\n", "<pre><code>x\n\n</code></pre>"},
		{"indented code", "    x = 1\n    y = 2", "<pre><code>x = 1\ny = 2\n</code></pre>"},
		{"bullets", "- a\n- b", "<ul><li>a</li><li>b</li></ul>"},
		{"nested lists", "- a\n  - b\n    1. c\n- d", "<ul><li>a<ul><li>b<ol><li>c</li></ol></li></ul></li><li>d</li></ul>"},
		{"ordered from 3", "3. c\n4. d", `<ol start="3"><li>c</li><li>d</li></ol>`},
		{"loose list", "- a\n\n- b", "<ul><li><p>a</p></li><li><p>b</p></li></ul>"},
		{"loose inside, tight outside", "- a\n  - b\n\n  - c\n- d", "<ul><li>a<ul><li><p>b</p></li><li><p>c</p></li></ul></li><li>d</li></ul>"},
		{"two paragraphs in an item", "1. x\n   - y\n\n   after\n2. w", "<ol><li><p>x</p><ul><li>y</li></ul><p>after</p></li><li><p>w</p></li></ol>"},
		{"a list then a paragraph", "- a\n\npara", "<ul><li>a</li></ul><p>para</p>"},
		{"item with code", "1. run:\n   ```\n   ls\n   ```", "<ol><li>run:<pre><code>ls\n</code></pre></li></ol>"},
		{"tasks", "- [ ] todo\n- [x] done", "<ul><li>☐ todo</li><li>☑ done</li></ul>"},
		{"quote", "> a\n> > b", "<blockquote><p>a</p><blockquote><p>b</p></blockquote></blockquote>"},
		{"rules", "***\n- - -", "<hr><hr>"},
		{"table", "a | b\n:-:|--\n`\\|` \\| x | *y*",
			`<div class="md-table"><table><thead><tr><th class="align-center">a</th><th>b</th></tr></thead>` +
				`<tbody><tr><td class="align-center"><code>|</code> | x</td><td><em>y</em></td></tr></tbody></table></div>`},
		{"link", `[a *b*](https://x.example/p?q=1&r=2 "T")`, `<p><a href="https://x.example/p?q=1&amp;r=2" title="T"` + ln + `>a <em>b</em></a></p>`},
		{"mailto and fragment", "[m](mailto:a@b.example) [f](#/chat) <a@b.example>",
			`<p><a href="mailto:a@b.example"` + ln + `>m</a> <a href="#/chat"` + ln + `>f</a> <a href="mailto:a@b.example"` + ln + `>a@b.example</a></p>`},
		{"autolink", "<https://x.example>", `<p><a href="https://x.example/"` + ln + `>https://x.example</a></p>`},
		{"bare URLs", "see https://x.example/a_(b). ok", `<p>see <a href="https://x.example/a_(b)"` + ln + `>https://x.example/a_(b)</a>. ok</p>`},
		{"no link in a link", "[a [b](https://b)](https://a)", `<p>[a <a href="https://b/"` + ln + `>b</a>](<a href="https://a/"` + ln + `>https://a</a>)</p>`},

		// Hostile input stays text, or a link only to the web.
		{"raw HTML", `<b onmouseover="x()">hi</b><script>alert(1)</script>`, `<p>&lt;b onmouseover="x()"&gt;hi&lt;/b&gt;&lt;script&gt;alert(1)&lt;/script&gt;</p>`},
		{"HTML block", "<div>\n<img src=x onerror=alert(1)>\n</div>", "<p>&lt;div&gt;<br>&lt;img src=x onerror=alert(1)&gt;<br>&lt;/div&gt;</p>"},
		{"javascript link", "[x](javascript:alert(1))", "<p>" + blocked + "x</span></p>"},
		{"JAVASCRIPT link", "[x](JAVASCRIPT:alert(1))", "<p>" + blocked + "x</span></p>"},
		{"split scheme", "[x](<java\tscript:alert(1)>)", "<p>" + blocked + "x</span></p>"},
		{"encoded scheme", "[x](&#x6A;avascript:alert(1))", "<p>" + blocked + "x</span></p>"},
		{"escaped scheme", `[x](javascript\:alert(1))`, "<p>" + blocked + "x</span></p>"},
		{"data link", "[x](data:text/html;base64,PHNjcmlwdD4=)", "<p>" + blocked + "x</span></p>"},
		{"vbscript and file", "[x](vbscript:x) [y](file:///etc/passwd)", "<p>" + blocked + "x</span> " + blocked + "y</span></p>"},
		{"relative paths", "[x](/v1/sandboxes) [y](//evil.example/) [z](report.csv)", "<p>" + blocked + "x</span> " + blocked + "y</span> " + blocked + "z</span></p>"},
		{"javascript autolink", "<javascript:alert(1)>", "<p>&lt;javascript:alert(1)&gt;</p>"},
		{"image", "![alt text](https://evil.example/p.png)", `<p><a href="https://evil.example/p.png" title="an image, not loaded"` + ln + `>image: alt text</a></p>`},
		{"javascript image", "![x](javascript:alert(1))", `<p><span class="md-blocked">x</span></p>`},
		{"quote in a title", `[x](https://x.example "a\" onclick=\"alert(1)")`, `<p><a href="https://x.example/" title="a&quot; onclick=&quot;alert(1)"` + ln + `>x</a></p>`},
		{"code language", "```js\" onload=\"x\nx\n```", `<pre><code class="language-js">x` + "\n</code></pre>"},
	} {
		if got := render(c.src); got != c.want {
			t.Errorf("%s: %q\n got %s\nwant %s", c.name, c.src, got, c.want)
		}
	}

	// Too long or too deeply nested for the renderer: shown as text.
	for _, c := range []struct{ name, expr string }{
		{"too long", `'<b>x</b> '.repeat(30000)`},
		{"too deep", `'*a '.repeat(20000) + ' a*'.repeat(20000)`},
	} {
		got := b.eval(`(() => { const src = ` + c.expr + `; const d = document.createElement('div'); d.append(window.md.renderMarkdown(src));` +
			` return d.textContent === src || d.querySelectorAll('*').length > 0 && !d.querySelector('b'); })()`)
		if got != "true" {
			t.Errorf("%s: not rendered as text or as Markdown", c.name)
		}
	}
}
