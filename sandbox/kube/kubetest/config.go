package kubetest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// pauseImage is the pods' sandbox image, made from busybox and imported
// before the kubelet starts (no registry is reachable).
const pauseImage = "cove.local/kubetest-pause:1"

// maxPods is the node's pod limit: above the kube runtime's benchmark of
// 100 sandboxes at once, below the 253 addresses of the pod /24.
const maxPods = 200

// writeContainerdConfig writes containerd's configuration: its root,
// state and socket in the cluster's directory, only the plugins a CRI
// node needs, and restrict_oom_score_adj, without which runc cannot
// start a container here (root lacks CAP_SYS_RESOURCE, and the kubelet
// asks for a lower oom_score_adj than containerd's).
func writeContainerdConfig(dir, cniConfDir string, g *gvisor) (string, error) {
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	text := strings.Join([]string{
		`version = 2`,
		`root = ` + q(filepath.Join(dir, "root")),
		`state = ` + q(filepath.Join(dir, "state")),
		`disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",` +
			` "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",` +
			` "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]`,
		`[grpc]`,
		`  address = ` + q(filepath.Join(dir, "containerd.sock")),
		`[ttrpc]`,
		`  address = ` + q(filepath.Join(dir, "containerd.sock.ttrpc")),
		`[debug]`,
		`  level = "warn"`,
		`[plugins."io.containerd.internal.v1.opt"]`,
		`  path = ` + q(filepath.Join(dir, "opt")),
		`[plugins."io.containerd.grpc.v1.cri"]`,
		`  sandbox_image = ` + q(pauseImage),
		`  restrict_oom_score_adj = true`,
		`  disable_apparmor = true`,
		`  stream_server_address = "127.0.0.1"`,
		`  stream_server_port = "0"`,
		`  max_concurrent_downloads = 3`,
		`  [plugins."io.containerd.grpc.v1.cri".containerd]`,
		`    snapshotter = "overlayfs"`,
		`    default_runtime_name = "runc"`,
		`    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]`,
		`      runtime_type = "io.containerd.runc.v2"`,
		`      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]`,
		`        SystemdCgroup = false`,
		g.runtime(),
		`  [plugins."io.containerd.grpc.v1.cri".cni]`,
		`    bin_dir = "/usr/lib/cni"`,
		`    conf_dir = ` + q(cniConfDir),
		``,
	}, "\n")
	path := filepath.Join(dir, "config.toml")
	return path, os.WriteFile(path, []byte(text), 0o644)
}

// writeCNIConfig writes the pod network: a bridge of the cluster's own
// with host-local addresses from its /24, no masquerading (nothing here
// reaches the internet, and no rule is added to the host's firewall).
func writeCNIConfig(confDir, ipamDir string, n *network) error {
	conf := map[string]any{
		"cniVersion": "0.4.0",
		"name":       n.bridge,
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      n.bridge,
			"isGateway":   true,
			"ipMasq":      false,
			"hairpinMode": true,
			"ipam": map[string]any{
				"type":   "host-local",
				"ranges": [][]map[string]string{{{"subnet": n.pods.String(), "gateway": n.gateway.String()}}},
				// Through the node, as on any cluster: what pods reach
				// beyond it is the node's routing and NetworkPolicy's
				// to say (the host does not forward for them here).
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": ipamDir,
			},
		}},
	}
	data, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(confDir, "10-"+n.bridge+".conflist"), data, 0o644)
}

// writeKubeletConfig writes the kubelet's configuration. The settings
// this machine needs (MACHINE-NOTES.md): cgroups v1 allowed, no
// per-QoS cgroups and no node-allocatable enforcement (the v1
// controllers cannot be delegated here). Image garbage collection is
// off: the images were imported and cannot be pulled again.
func writeKubeletConfig(dir, runtimeSock, caFile string, port int, n *network) (string, error) {
	conf := map[string]any{
		"apiVersion":                  "kubelet.config.k8s.io/v1beta1",
		"kind":                        "KubeletConfiguration",
		"address":                     n.gateway.String(),
		"port":                        port,
		"readOnlyPort":                0,
		"healthzPort":                 0,
		"containerRuntimeEndpoint":    "unix://" + runtimeSock,
		"cgroupDriver":                "cgroupfs",
		"failCgroupV1":                false,
		"cgroupsPerQOS":               false,
		"enforceNodeAllocatable":      []string{},
		"failSwapOn":                  false,
		"maxPods":                     maxPods,
		"podPidsLimit":                -1,
		"serializeImagePulls":         false,
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard": map[string]string{
			"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
		},
		"podLogsDir":                filepath.Join(dir, "pod-logs"),
		"volumePluginDir":           filepath.Join(dir, "volume-plugins"),
		"nodeStatusUpdateFrequency": "5s",
		"syncFrequency":             "10s",
		"fileCheckFrequency":        "10s",
		"runtimeRequestTimeout":     "10m",
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": caFile},
		},
		"authorization": map[string]any{"mode": "Webhook"},
	}
	// JSON is YAML: the kubelet reads either.
	data, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "config.yaml")
	return path, os.WriteFile(path, data, 0o644)
}
