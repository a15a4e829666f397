package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"slices"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/api"
)

// artifactPDF is a one-page PDF, enough for a viewer to open.
const artifactPDF = "%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n" +
	"3 0 obj<</Type/Page/MediaBox[0 0 200 100]/Parent 2 0 R>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"

// execCall is an exec_command call of cmd, as the model sends it.
func execCall(cmd string) fake.Turn {
	args, _ := json.Marshal(map[string]string{"cmd": cmd})
	return fake.Call("exec_command", string(args))
}

// testPNG is a w×h image, encoded.
func testPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		for y := range h {
			img.Set(x, y, color.RGBA{0, 128, 128, 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestUIBrowserArtifacts: files a script writes (an image, a PDF, a CSV,
// something else) show in the timeline as "created ..." and in the
// Artifacts panel, each in its way; a file the next command deletes
// leaves the panel; the Runs API has a file_changed event for each.
func TestUIBrowserArtifacts(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString
	script := fmt.Sprintf("mkdir -p out && printf %%s %s | base64 -d > out/chart.png && printf %%s %s | base64 -d > report.pdf && "+
		"printf 'city,people\\nParis,2100000\\nLyon,520000\\n' > report.csv && printf 'raw' > data.bin && printf 'log line\\n' > run.log && mkdir -p .git && touch .git/index",
		b64(testPNG(t, 48, 32)), b64([]byte(artifactPDF)))
	model := fake.NewServer(t,
		execCall(script),
		// A file apply_patch writes is reported by it, with its diff, and
		// not again by the command after it.
		fake.Custom("apply_patch", "*** Begin Patch\n*** Add File: notes.md\n+# Notes\n*** End Patch"),
		execCall("rm data.bin && printf 'Berlin,3600000\\n' >> report.csv"),
		// A moved file leaves the panel under its old name.
		fake.Custom("apply_patch", "*** Begin Patch\n*** Update File: notes.md\n*** Move to: docs/notes.md\n@@\n-# Notes\n+# Moved notes\n*** End Patch"),
		fake.Text("The chart, the report and its data are in the workspace."),
	)
	ts := newTestServer(t, Config{Model: ModelConfig{BaseURL: model.URL, APIKey: "sk-test", DefaultModel: "gpt-5.1"}})
	key := ts.teamKey(t, "artifacts")
	sb := ts.create(t, key, api.CreateSandbox{})
	b := newBrowser(t, ts.URL)
	b.signIn(key)

	b.open("#/chat?sandbox=" + sb.ID)
	b.wait("the workspace picked", `document.querySelector('#workspace').value === `+js(sb.ID))
	b.fill("#task", "Make a chart and a report.")
	b.click("#start-run")
	b.wait("the run's page", `location.hash.startsWith('#/runs/') && !!document.querySelector('#timeline')`)
	runID := strings.TrimPrefix(b.eval(`location.hash`), "#/runs/")
	b.waitText("#timeline .event.final .answer", "The chart, the report")

	// The timeline: one line per file a command wrote, with its size;
	// the patch's file with its diff.
	for _, f := range []struct{ sel, want string }{
		{`#timeline .event.change[data-path="out/chart.png"][data-action="created"]`, "created out/chart.png"},
		{`#timeline .event.change[data-path="report.pdf"][data-action="created"]`, "created report.pdf"},
		{`#timeline .event.change[data-path="report.csv"][data-action="created"]`, "38 B"},
		{`#timeline .event.change[data-path="report.csv"][data-action="updated"]`, "updated report.csv"},
		{`#timeline .event.change[data-path="data.bin"][data-action="deleted"]`, "deleted data.bin"},
		{`#timeline .event.change[data-path="notes.md"] .diff .add`, "+# Notes"},
	} {
		b.waitText(f.sel, f.want)
	}
	if n := b.eval(`document.querySelectorAll('#timeline .event.change').length`); n != "9" {
		t.Errorf("%s file changes in the timeline, want 9 (.git is noise, notes.md once)", n)
	}

	// The panel: the image and the PDF inline, the CSV as a table (its
	// last state), the deleted file gone.
	b.wait("the image artifact", `(() => { const i = document.querySelector('#artifacts li[data-path="out/chart.png"] img'); return !!i && i.complete && i.naturalWidth === 48; })()`)
	b.wait("the PDF artifact", `!!document.querySelector('#artifacts li[data-path="report.pdf"] iframe.preview-pdf')`)
	b.waitText(`#artifacts li[data-path="report.csv"] table.csv`, "Berlin")
	b.waitText(`#artifacts li[data-path="report.csv"] table.csv`, "Lyon")
	for _, gone := range []string{"data.bin", "notes.md"} {
		if n := b.eval(`document.querySelectorAll('#artifacts li[data-path="` + gone + `"]').length`); n != "0" {
			t.Errorf("%s, deleted or moved, is still in the Artifacts panel", gone)
		}
	}
	b.waitText(`#artifacts li[data-path="docs/notes.md"] code`, "docs/notes.md")
	b.screenshot("artifacts")

	// Reopened, the replay shows each file once.
	b.open("#/chat")
	b.click(`#runs a[href="#/runs/` + runID + `"]`)
	b.wait("the replayed artifacts", `document.querySelectorAll('#artifacts li').length === 5`)
	b.waitText(`#artifacts li[data-path="report.csv"] table.csv`, "Berlin")

	// Anything else is offered as a download, and shown on request.
	b.click(`#artifacts li[data-path="run.log"] button:not([aria-label])`)
	b.waitText(`#artifacts li[data-path="run.log"] pre`, "log line")
	if n := b.eval(`document.querySelectorAll('#artifacts li[data-path="run.log"] button[aria-label="Download run.log"]').length`); n != "1" {
		t.Errorf("run.log has %s download buttons, want 1", n)
	}

	// The Runs API: a file_changed event for each change, whoever wrote it.
	var got []string
	for _, ev := range ofType(ts.readEvents(t, key, runID, 0, ""), "file_changed") {
		got = append(got, ev.str("action")+" "+ev.str("path"))
		if ev.str("path") == "notes.md" && !strings.Contains(ev.str("diff"), "+# Notes") {
			t.Errorf("notes.md's change has no diff: %+v", ev.Data)
		}
	}
	want := []string{"created out/chart.png", "created data.bin", "created report.csv", "created notes.md", "created report.pdf", "created run.log", "deleted data.bin", "moved docs/notes.md", "updated report.csv"}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("file_changed events: got %q, want %q", got, want)
	}
}
