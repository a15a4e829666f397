package kubetest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/cove-sandbox/cove/sandbox/kube/internal/ocitar"
	"github.com/cove-sandbox/cove/sandbox/mountinfo"
)

func TestMain(m *testing.M) { Main(m) }

const testImage = "cove.local/kubetest-selftest:1"

// importBusybox imports a busybox image (imagetest does the same; it
// cannot be imported from here without a cycle).
func importBusybox(t *testing.T, c *Cluster) string {
	t.Helper()
	files, err := ocitar.BusyboxFiles()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := ocitar.Write(&buf, ocitar.Image{Ref: testImage, Cmd: []string{"sh"}, Env: []string{"PATH=/bin"}, Files: files}); err != nil {
		t.Fatal(err)
	}
	c.ImportImage(t, testImage, &buf)
	return testImage
}

func clientset(t *testing.T, c *Cluster) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// runPod runs a pod of one busybox container running script, with the
// given volumes mounted at /data, waits for it to finish and returns its
// log.
func runPod(t *testing.T, c *Cluster, name, script string, claim string) string {
	t.Helper()
	return runPodClass(t, c, name, script, claim, "")
}

func runPodClass(t *testing.T, c *Cluster, name, script, claim, class string) string {
	t.Helper()
	cs := clientset(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name: "main", Image: importBusybox(t, c), ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", script},
			}},
		},
	}
	if class != "" {
		pod.Spec.RuntimeClassName = &class
	}
	if claim != "" {
		pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = cs.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	for {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s: %v", name, err)
		}
		if p.Status.Phase == corev1.PodSucceeded {
			break
		}
		if p.Status.Phase == corev1.PodFailed {
			logs, _ := cs.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
			t.Fatalf("pod %s failed: %+v\nits log:\n%s", name, p.Status, logs)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s did not finish: %+v", name, p.Status)
		case <-time.After(200 * time.Millisecond):
		}
	}
	logs, err := cs.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading pod %s's log: %v", name, err)
	}
	return string(logs)
}

func TestPodRunsAndLogs(t *testing.T) {
	c := Shared(t)
	got := runPod(t, c, "hello", "echo hello from $(hostname); ls /bin/sleep", "")
	if want := "hello from hello\n/bin/sleep\n"; got != want {
		t.Errorf("log = %q, want %q", got, want)
	}
	// kubectl parses the server's version (stamped at build) and reads
	// the same log.
	out, err := exec.Command(c.Bin("kubectl"), "--kubeconfig", c.Kubeconfig(), "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Server Version: v1.") {
		t.Errorf("kubectl version: %v: %s", err, out)
	}
	out, err = exec.Command(c.Bin("kubectl"), "--kubeconfig", c.Kubeconfig(), "logs", "hello").CombinedOutput()
	if err != nil || string(out) != got {
		t.Errorf("kubectl logs = %q, %v; want %q", out, err, got)
	}
}

// TestGVisorRuntimeClass: a pod of the gVisor RuntimeClass runs on
// gVisor's kernel (gVisor's containerd shim and runsc), a runc pod on the
// host's.
func TestGVisorRuntimeClass(t *testing.T) {
	c := Shared(t)
	class, err := c.GVisor()
	if err != nil {
		t.Fatal(err)
	}
	script := "dmesg 2>&1 | head -1; uname -r"
	got := runPodClass(t, c, "on-gvisor", script, "", class)
	if !strings.HasPrefix(got, "[   0.000000] Starting gVisor...\n") {
		t.Errorf("a gVisor pod's dmesg and uname -r: %q, want gVisor's boot log", got)
	}
	if host := runPod(t, c, "on-runc", script, ""); strings.Contains(host, "gVisor") || host == got {
		t.Errorf("a runc pod's dmesg and uname -r: %q, want the host's kernel", host)
	}
}

func TestClaimAndCloneCarryData(t *testing.T) {
	c := Shared(t)
	cs := clientset(t, c)
	ctx := context.Background()
	claim := func(name, source string) {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceStorage: resource.MustParse("10Mi")}},
			},
		}
		if source != "" {
			pvc.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: source}
		}
		if _, err := cs.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating claim %s: %v", name, err)
		}
	}
	claim("origin", "")
	got := runPod(t, c, "writer", "echo carried > /data/note && mkdir /data/d && ln -s ../note /data/d/link && cat /data/note", "origin")
	if got != "carried\n" {
		t.Fatalf("writer's log = %q", got)
	}
	claim("clone", "origin")
	got = runPod(t, c, "reader", "cat /data/note /data/d/link && echo changed > /data/note", "clone")
	if got != "carried\ncarried\n" {
		t.Errorf("reader's log = %q, want the origin's note twice (file and link)", got)
	}
	got = runPod(t, c, "rereader", "cat /data/note", "origin")
	if got != "carried\n" {
		t.Errorf("origin after the clone changed = %q, want it unchanged", got)
	}
	// The claim defaulted to the cluster's class, and deleting it
	// deletes its volume and directory.
	pvc, err := cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "clone", metav1.GetOptions{})
	if err != nil || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != c.StorageClass() {
		t.Fatalf("clone claim: %v, class %v, want %s", err, pvc.Spec.StorageClassName, c.StorageClass())
	}
	waitDeleted(t, cs, "reader")
	volume := filepath.Join(c.dir, "volumes", pvc.Spec.VolumeName)
	if _, err := os.Stat(volume); err != nil {
		t.Fatalf("the clone's volume directory: %v", err)
	}
	if err := cs.CoreV1().PersistentVolumeClaims("default").Delete(ctx, "clone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := os.Stat(volume)
		if os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deleted clone's volume directory is still there: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitDeleted deletes a pod and waits for it to be gone (a claim in use
// by a pod is not deleted).
func waitDeleted(t *testing.T, cs *kubernetes.Clientset, name string) {
	t.Helper()
	ctx := context.Background()
	zero := int64(0)
	_ = cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if _, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s not deleted", name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestStopLeavesNothing starts a private cluster that enforces
// NetworkPolicy and routes Services, runs pods in it and stops it: no
// process, mount, cgroup, interface, file, firewall rule or kube-proxy
// table of it is left, and the host setting kube-proxy needed is as it
// was.
func TestStopLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second cluster")
	}
	c := Start(t)
	if err := c.EnforceNetworkPolicy(); err != nil {
		t.Fatal(err)
	}
	bridgeNF, _ := os.ReadFile(filepath.Join("/proc/sys", bridgeNFCallIPTables))
	if err := c.RouteServices(); err != nil {
		t.Fatal(err)
	}
	checkServicesRouted(t, c)
	if got := runPod(t, c, "brief", "sleep 3600 & echo started", ""); got != "started\n" {
		t.Fatalf("log = %q", got)
	}
	// Pods still running at Stop, on runc and on gVisor.
	longPod(t, c, "long", "")
	class, err := c.GVisor()
	if err != nil {
		t.Fatal(err)
	}
	longPod(t, c, "long-gvisor", class)
	cgroups := containerCgroups(c.dir)
	if len(cgroups) == 0 {
		t.Fatal("no container cgroups found before Stop: the check below would prove nothing")
	}
	bridge, err := netlink.LinkByName(c.id)
	if err != nil {
		t.Fatal(err)
	}
	var veths []string
	links, _ := netlink.LinkList()
	for _, l := range links {
		if l.Attrs().MasterIndex == bridge.Attrs().Index {
			veths = append(veths, l.Attrs().Name)
		}
	}
	if len(veths) == 0 {
		t.Fatal("no pod interface on the bridge before Stop")
	}
	// The enforcer's rules and sets name the cluster's addresses (another
	// cluster may take the enforcer over the moment this one stops).
	ours := strings.TrimSuffix(c.podCIDR, "0/24")
	enforced := func() string {
		rules, _ := filterRules()
		sets, _ := exec.Command("ipset", "list").Output()
		var out []string
		for line := range strings.SplitSeq(string(rules)+string(sets), "\n") {
			if strings.Contains(line, ours) || strings.Contains(line, c.serviceCIDR) {
				out = append(out, line)
			}
		}
		return strings.Join(out, "\n")
	}
	if enforced() == "" {
		t.Fatal("no NetworkPolicy rule of the cluster before Stop: the check below would prove nothing")
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if left := enforced(); left != "" {
		t.Errorf("the NetworkPolicy enforcer's rules or sets left:\n%s", left)
	}
	if left, err := kubeProxyLeft(); err != nil || left != "" {
		t.Errorf("kube-proxy's rules left: %v\n%s", err, left)
	}
	if tables, err := exec.Command("nft", "list", "tables").Output(); err != nil || bytes.Contains(tables, []byte(c.id)) {
		t.Errorf("the cluster's forwarding table left: %v\n%s", err, tables)
	}
	if now, _ := os.ReadFile(filepath.Join("/proc/sys", bridgeNFCallIPTables)); !bytes.Equal(now, bridgeNF) {
		t.Errorf("%s = %q after Stop, want %q as before", bridgeNFCallIPTables, now, bridgeNF)
	}
	if ps := procsMentioning(c.dir + "/"); len(ps) > 0 {
		t.Errorf("processes left: %v", ps)
	}
	for _, name := range append(veths, c.id) {
		if _, err := netlink.LinkByName(name); err == nil {
			t.Errorf("interface %s left", name)
		}
	}
	for _, cg := range cgroups {
		if _, err := os.Stat(cg); err == nil {
			t.Errorf("cgroup %s left", cg)
		}
	}
	if m, _ := mountinfo.Under(c.dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	table, _ := os.ReadFile("/proc/self/mountinfo")
	if bytes.Contains(table, []byte(c.id)) {
		t.Errorf("a mount naming %s is left in the host's mount table", c.id)
	}
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		t.Errorf("directory %s left: %v", c.dir, err)
	}
}

// longPod starts a pod that runs until killed, with the RuntimeClass
// class if not "", and waits for it to run.
func longPod(t *testing.T, c *Cluster, name, class string) {
	t.Helper()
	cs := clientset(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: testImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
		}}},
	}
	if class != "" {
		pod.Spec.RuntimeClassName = &class
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("pod %s not running: %v %v", name, err, p.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkServicesRouted checks what RouteServices promises: a Service in
// front of a pod answers at its cluster IP from the host and from
// another pod, and a pod reaches the API server at the kubernetes
// Service's address, as in-cluster configuration does. Without
// kube-proxy nothing answers at a cluster IP.
func checkServicesRouted(t *testing.T, c *Cluster) {
	t.Helper()
	cs := clientset(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const page = "served by web\n"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: importBusybox(t, c), ImagePullPolicy: corev1.PullNever,
			Command: []string{"sh", "-c", "mkdir /www && echo served by web >/www/index.html && exec httpd -f -p 8080 -h /www"},
		}}},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	svc, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + svc.Spec.ClusterIP + "/"
	// From the host, once the pod is ready and kube-proxy has synced. A
	// new connection each try: until the cluster IP is routed, packets to
	// it take the host's default route, and whatever answers there must
	// not keep the connection.
	client := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var got string
	for {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if got = string(body); got == page {
				break
			}
		} else {
			got = err.Error()
		}
		if ctx.Err() != nil {
			t.Fatalf("GET %s from the host: %s; want %q", url, got, page)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// From another pod on the same bridge, and the API server through
	// the kubernetes Service. busybox's nc speaks the HTTP (its wget
	// crashes in an image without libc); the API server, a Go HTTPS
	// server, answers plain HTTP with a 400 that says so.
	get := `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 10 `
	got = runPod(t, c, "client", get+svc.Spec.ClusterIP+" 80 && echo && "+get+"$KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT", "")
	got = strings.ReplaceAll(got, "\r", "")
	if !strings.Contains(got, "\n\n"+page) || !strings.Contains(got, "Client sent an HTTP request to an HTTPS server") {
		t.Errorf("a pod's GET of %s and of the API server through the kubernetes Service: %q", url, got)
	}
}
