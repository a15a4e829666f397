package cli

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/api"
)

// TestServeRunSurvivesSIGKILL: cove serve killed with SIGKILL while an
// agent run waits on the model goes on with the run when it starts again,
// from the last turn, in the same sandbox; the run's log is continuous.
func TestServeRunSurvivesSIGKILL(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	home, data := serveHome(t, "cr")
	model := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"echo kept > kept.txt"}`),
		fake.Text("never seen").WithDelay(time.Minute),
		fake.Text("finished after the kill"),
	)
	flags := []string{"--model-base-url", model.URL, "--model", "m"}
	p := startServe(t, home, data, flags...)
	var run api.Run
	if code := apiCall(t, "POST", p.url+"/v1/runs", p.admin, api.CreateRun{Input: "keep a file", Agent: api.RunAgent{Approval: "never"}}, &run); code != 201 {
		t.Fatalf("create run: %d", code)
	}
	for deadline := time.Now().Add(time.Minute); len(model.Requests()) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second model call never came:\n%s", p.stderr.String())
		}
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()

	p2 := startServe(t, home, data, flags...)
	var got api.Run
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if code := apiCall(t, "GET", p2.url+"/v1/runs/"+run.ID, p.admin, nil, &got); code != 200 {
			t.Fatalf("the run after the restart: %d", code)
		}
		if got.Status != api.RunRunning || time.Now().After(deadline) {
			break
		}
	}
	if got.Status != api.RunIdle || got.Output != "finished after the kill" {
		t.Fatalf("run after SIGKILL and restart: %+v\n%s", got, p2.stderr.String())
	}
	req, _ := http.NewRequest("GET", p2.url+"/v1/sandboxes/"+got.SandboxID+"/files?path=/workspace/kept.txt", nil)
	req.Header.Set("Authorization", "Bearer "+p.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "kept\n" {
		t.Errorf("the run's file after the restart: %d %q", resp.StatusCode, body)
	}
	reqs := model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model calls, want 3 (the one cut by the kill is asked again)", len(reqs))
	}
	if o, ok := reqs[2].ToolOutput("call_1"); !ok || !strings.Contains(o, "exited with code 0") {
		t.Errorf("the resumed run lost the first turn's output: %q %v", o, ok)
	}
}
