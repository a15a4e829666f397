package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/sandbox/local"
)

// replicaSet is `cove bench --server --replicas N`'s servers: N `cove
// serve --replicas` processes of this binary on one data directory
// behind a round-robin balancer.
type replicaSet struct {
	exe, home, data string
	procs           []*exec.Cmd
	urls            []string
	admin           string
	lb              *roundRobin
	stopHealth      context.CancelFunc
	front           *http.Server
	url             string
	stderr          io.Writer
}

// startReplicas starts n servers in dir and the balancer in front.
func startReplicas(ctx context.Context, dir string, n int, stderr io.Writer) (*replicaSet, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	rs := &replicaSet{exe: exe, home: dir, data: filepath.Join(dir, "srv"), lb: &roundRobin{}, stderr: stderr}
	for i := range n {
		if err := rs.start(ctx, i); err != nil {
			rs.stop()
			return nil, err
		}
	}
	rs.lb.set(rs.urls...)
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rs.stopHealth = cancel
	go rs.lb.checkHealth(hctx, 200*time.Millisecond)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		rs.stop()
		return nil, err
	}
	rs.front = &http.Server{Handler: rs.lb}
	go rs.front.Serve(l)
	rs.url = "http://" + l.Addr().String()
	return rs, nil
}

// start starts server i (again) and waits until it listens.
func (rs *replicaSet) start(ctx context.Context, i int) error {
	cmd := exec.Command(rs.exe, "serve", "--replicas", "--addr", "127.0.0.1:0", "--data", rs.data, "--state-dir", rs.home, "--pool", "0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	errOut, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	found := make(chan string, 2)
	go scanFor(out, "COVE_API_KEY=", found)
	go scanFor(errOut, "url=", found)
	var url string
	for url == "" || (i == 0 && rs.admin == "") { // the first start prints the admin key
		select {
		case v := <-found:
			if k, ok := strings.CutPrefix(v, "COVE_API_KEY="); ok {
				rs.admin = k
			} else {
				url = strings.TrimPrefix(v, "url=")
			}
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			cmd.Wait()
			return fmt.Errorf("cove serve (replica %d) did not start within a minute", i+1)
		case <-ctx.Done():
			cmd.Process.Kill()
			cmd.Wait()
			return ctx.Err()
		}
	}
	if i < len(rs.procs) {
		rs.procs[i], rs.urls[i] = cmd, url
	} else {
		rs.procs, rs.urls = append(rs.procs, cmd), append(rs.urls, url)
	}
	return nil
}

// scanFor sends each field of r's lines that starts with prefix, and
// reads r to its end (a server's log must not fill its pipe).
func scanFor(r io.Reader, prefix string, found chan<- string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		for _, f := range strings.Fields(sc.Text()) {
			if strings.HasPrefix(f, prefix) {
				select {
				case found <- f:
				default:
				}
			}
		}
	}
}

// kill SIGKILLs server i; the balancer sends its requests to the others.
func (rs *replicaSet) kill(i int) {
	rs.procs[i].Process.Kill()
	rs.procs[i].Wait()
}

// chaos SIGKILLs the last server a third into d and restarts it two
// thirds in, and says when.
func (rs *replicaSet) chaos(ctx context.Context, d time.Duration, note func(string)) {
	i := len(rs.procs) - 1
	t0 := time.Now()
	select {
	case <-time.After(d / 3):
	case <-ctx.Done():
		return
	}
	rs.kill(i)
	killed := time.Since(t0)
	select {
	case <-time.After(d / 3):
	case <-ctx.Done():
		return
	}
	if err := rs.start(ctx, i); err != nil {
		note(fmt.Sprintf("replica %d SIGKILLed at %.0fs; its restart failed: %v", i+1, killed.Seconds(), err))
		return
	}
	rs.lb.set(rs.urls...)
	note(fmt.Sprintf("replica %d of %d SIGKILLed at %.0fs, restarted at %.0fs", i+1, len(rs.procs), killed.Seconds(), time.Since(t0).Seconds()))
}

// stop deletes every sandbox left (their supervisors outlive the
// servers), then stops the servers (SIGTERM) and the balancer.
func (rs *replicaSet) stop() {
	if rt, err := local.New(local.Config{Dir: filepath.Join(rs.data, "sandboxes")}); err == nil {
		bg := context.Background()
		if infos, err := rt.List(bg); err == nil {
			for _, in := range infos {
				rt.Delete(bg, in.ID)
			}
		}
	}
	for _, p := range rs.procs {
		p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
	if rs.front != nil {
		rs.front.Close()
	}
	if rs.stopHealth != nil {
		rs.stopHealth()
	}
}
