#!/usr/bin/env bash
# Installs what Cove needs on a fresh Debian 12 machine. Idempotent: it
# only installs what is missing.
#   scripts/deps.sh run    what building Cove and running cove serve need (make run)
#   scripts/deps.sh test   that, and what the tests need besides (make test; the default)
set -euo pipefail

mode="${1:-test}"
case "$mode" in
run | test) ;;
*)
	echo "usage: scripts/deps.sh [run|test]" >&2
	exit 2
	;;
esac

# have: a program on the PATH or in an sbin directory (not on every
# user's PATH).
have() { command -v "$1" >/dev/null || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }

need=()
# Running: building bin/cove (go build stamps the git revision) and what
# cove serve uses on the host.
have git || need+=(git) # also git_repo manifest entries, cloned on the host
have make || need+=(make)
have stty || need+=(coreutils)
# Model endpoints, git clones and Debian mirrors over HTTPS.
[ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
# The local runtime's capped disks are ext4 images; templates are built
# from Debian packages by mmdebstrap (or debootstrap).
have mkfs.ext4 || need+=(e2fsprogs)
have mmdebstrap || have debootstrap || need+=(mmdebstrap)
# A sandbox's sudo is the daemon's, bound over /usr/bin/sudo; on the host
# template (the host's /usr) that file must exist (sandbox/local/pid1/
# sudo.go), or sandboxes there, E2B's included, have no sudo.
[ -e /usr/bin/sudo ] || need+=(sudo)
# PostgreSQL, for cove serve --store postgres://... (a user may run it on
# this machine) and for the PostgreSQL store's tests, which start their own
# servers in temporary directories (store/postgres/pgtest).
pg_installed() { compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; }
pg_installed || need+=(postgresql)

if [ "$mode" = test ]; then
	# Tests use pkill (procps) and dpkg-deb (dpkg), and build templates
	# with both bootstrappers when they can.
	have pkill || need+=(procps)
	have dpkg-deb || need+=(dpkg)
	have mmdebstrap || need+=(mmdebstrap)
	have debootstrap || need+=(debootstrap)
	# The agent's end-to-end test runs pytest inside a sandbox on the host
	# template, which sees the host's /usr.
	/usr/bin/python3 -c 'import pytest' 2>/dev/null || need+=(python3 python3-pytest)
	# The tiers' toolchain test (sandbox/local) builds a C program, pip
	# installs a package and runs git inside both tiers, over the host's
	# /usr; the race detector needs gcc too.
	have gcc || need+=(gcc libc6-dev)
	/usr/bin/python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
	have git || need+=(git)
	# The MCP adapter's tests run a real npm MCP server with node; the E2B
	# and Agents SDK tests run the SDKs with node.
	have node || need+=(nodejs)
	have npm || need+=(npm)
	# The web UI's browser tests drive Debian's chromium headless (server).
	[ -x /usr/bin/chromium ] || need+=(chromium)
	# The kube runtime's test cluster (sandbox/kube/kubetest): Debian's
	# etcd, containerd and runc, the CNI bridge and host-local plugins,
	# and a static busybox for the pause image and the test images.
	have etcd || need+=(etcd-server)
	have containerd || need+=(containerd)
	have runc || need+=(runc)
	[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
	dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
	# kube-router's network policy controller, which enforces the kube
	# runtime's NetworkPolicy objects on the test cluster, drives iptables
	# and ipset.
	have iptables-save || need+=(iptables)
	have ipset || need+=(ipset)
	# kube-proxy, which routes the test cluster's Services, drives nft.
	have nft || need+=(nftables)
fi
if ((${#need[@]})); then
	if [ "$(id -u)" -ne 0 ]; then
		echo "deps: missing ${need[*]}; run as root or install them with apt-get" >&2
		exit 1
	fi
	# Debian's package would make and start a system cluster on port 5432;
	# nothing here needs it (a user makes their own, the tests theirs), so
	# none is made.
	if [[ " ${need[*]} " == *" postgresql "* ]]; then
		mkdir -p /etc/postgresql-common/createcluster.d
		echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/cove-no-main-cluster.conf
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
	export PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null || { echo "deps: Go 1.26 is required (expected at /usr/local/go)" >&2; exit 1; }
go mod download

# gVisor's runsc, which runs sandboxes created with --isolation gvisor
# (local.Config.Runsc: runsc on the PATH, else /usr/local/bin/runsc).
# Built from the gVisor module pinned in tools/runsc, a module of its own
# so the main module never sees gVisor's dependencies, with CGO_ENABLED=0
# (a cgo build of runsc fails), into a git-ignored cache named by the
# version: about 90 s and 100 MB of modules the first time, nothing after
# until the pin moves. The version is stamped in: runsc --version names it,
# and runsc restores only checkpoints its own version wrote. Installed as
# /usr/local/bin/runsc when that differs (a rename: running sandboxes keep
# the binary they started with).
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# GOWORK=off: a go.work above the checkout must not pull tools/runsc in.
runsc_version="$(GOWORK=off go -C "$repo/tools/runsc" list -m -f '{{.Version}}' gvisor.dev/gvisor)"
runsc_cache="$repo/.cache/runsc"
runsc_bin="$runsc_cache/runsc-$runsc_version"
if [ ! -x "$runsc_bin" ]; then
	echo "deps: building gVisor's runsc $runsc_version (about 90 s the first time)" >&2
	mkdir -p "$runsc_cache"
	rm -f "$runsc_cache"/runsc-*
	GOWORK=off CGO_ENABLED=0 go -C "$repo/tools/runsc" build -trimpath -buildvcs=false \
		-ldflags "-X gvisor.dev/gvisor/runsc/version.version=$runsc_version" \
		-o "$runsc_bin.tmp" gvisor.dev/gvisor/runsc
	mv "$runsc_bin.tmp" "$runsc_bin"
fi
if ! cmp -s "$runsc_bin" /usr/local/bin/runsc; then
	if [ -w /usr/local/bin ]; then
		tmp="$(mktemp /usr/local/bin/.runsc.XXXXXX)"
		install -m 0755 "$runsc_bin" "$tmp"
		mv -f "$tmp" /usr/local/bin/runsc
	else
		echo "deps: runsc is built at $runsc_bin; as root, install it as /usr/local/bin/runsc for --isolation gvisor" >&2
	fi
fi

[ "$mode" = test ] || exit 0

# Kubernetes for the kube runtime's test cluster (sandbox/kube/kubetest):
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy and kubectl built from the k8s.io/kubernetes release pinned
# in tools/kube (a module of its own; no prebuilt binary can be
# downloaded here) into a git-ignored cache named by the version, one
# binary at a time (each link takes a few GB), only those missing: about
# 18 min of CPU the first time, nothing after until the pin moves. The
# version is stamped in: kubectl cannot parse an unstamped server's
# version.
kube_version="$(GOWORK=off go -C "$repo/tools/kube" list -m -f '{{.Version}}' k8s.io/kubernetes)"
kube_cache="$repo/.cache/kube/$kube_version"
kube_major="${kube_version#v}"
kube_major="${kube_major%%.*}"
kube_minor="${kube_version#v*.}"
kube_minor="${kube_minor%%.*}"
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kube_ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=$kube_major -X $pkg.gitMinor=$kube_minor"
	kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
kube_missing=()
for bin in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
	[ -x "$kube_cache/$bin" ] || kube_missing+=("$bin")
done
if ((${#kube_missing[@]})); then
	echo "deps: building Kubernetes $kube_version (${kube_missing[*]}) into $kube_cache: about $((3 * ${#kube_missing[@]})) min of CPU the first time" >&2
	mkdir -p "$kube_cache"
	for bin in "${kube_missing[@]}"; do
		echo "deps: building $bin $kube_version" >&2
		GOWORK=off CGO_ENABLED=0 go -C "$repo/tools/kube" build -trimpath -buildvcs=false \
			-ldflags "$kube_ldflags" -o "$kube_cache/$bin.tmp" "k8s.io/kubernetes/cmd/$bin"
		mv "$kube_cache/$bin.tmp" "$kube_cache/$bin"
	done
fi

# kube-router, pinned in tools/kuberouter (its go.mod says why this one):
# the test cluster's NetworkPolicy enforcer. About 2 min of CPU the first
# time.
kuberouter_version="$(GOWORK=off go -C "$repo/tools/kuberouter" list -m -f '{{.Version}}' github.com/cloudnativelabs/kube-router/v2)"
kuberouter_bin="$repo/.cache/kube/kube-router-$kuberouter_version"
if [ ! -x "$kuberouter_bin" ]; then
	echo "deps: building kube-router $kuberouter_version into $kuberouter_bin" >&2
	mkdir -p "$repo/.cache/kube"
	GOWORK=off CGO_ENABLED=0 go -C "$repo/tools/kuberouter" build -trimpath -buildvcs=false -ldflags "-s -w" \
		-o "$kuberouter_bin.tmp" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
	mv "$kuberouter_bin.tmp" "$kuberouter_bin"
fi

# gVisor's containerd shim (containerd-shim-runsc-v1), which runs the test
# cluster's gVisor RuntimeClass, from the same gVisor pin as runsc (tools/
# runsc). One change at build time, on a copy of the module in a temporary
# directory: the shim leaves its own oom_score_adj as containerd's instead of
# lowering it to -999, which needs CAP_SYS_RESOURCE and root lacks it here
# (MACHINE-NOTES.md); upstream's shim cannot start on these machines. About
# 30 s the first time.
shim_bin="$runsc_cache/containerd-shim-runsc-v1-$runsc_version"
if [ ! -x "$shim_bin" ]; then
	echo "deps: building gVisor's containerd shim $runsc_version into $shim_bin" >&2
	shim_work="$(mktemp -d)"
	cp -r "$(GOWORK=off go -C "$repo/tools/runsc" list -m -f '{{.Dir}}' gvisor.dev/gvisor)" "$shim_work/gvisor"
	chmod -R u+w "$shim_work/gvisor"
	manager="$shim_work/gvisor/pkg/shim/v1/manager.go"
	sed -i 's/^\toomScoreMax = -999$/\toomScoreMax = 0/' "$manager"
	grep -q 'oomScoreMax = 0$' "$manager" && ! grep -q 'oomScoreMax = -999' "$manager" || { echo "deps: gVisor's shim no longer sets oomScoreMax = -999 in $manager: look again at the change above" >&2; rm -rf "$shim_work"; exit 1; }
	cp "$repo/tools/runsc/go.mod" "$repo/tools/runsc/go.sum" "$shim_work/"
	echo "replace gvisor.dev/gvisor => $shim_work/gvisor" >>"$shim_work/go.mod"
	GOWORK=off CGO_ENABLED=0 go -C "$repo/tools/runsc" build -modfile "$shim_work/go.mod" -trimpath -buildvcs=false \
		-ldflags "-s -w" -o "$shim_bin.tmp" gvisor.dev/gvisor/shim
	rm -rf "$shim_work"
	mv "$shim_bin.tmp" "$shim_bin"
fi

# The npm MCP server the MCP adapter's tests run (agent/tool/mcp), in a
# git-ignored directory of the repo. Pinned so the tests see the same
# server everywhere; this version runs on Debian 12's node 18.
mcp_memory_version=2026.8.31
npm_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.cache/npm"
if ! grep -qs "\"version\": \"$mcp_memory_version\"" "$npm_dir/node_modules/@modelcontextprotocol/server-memory/package.json"; then
	npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error "@modelcontextprotocol/server-memory@$mcp_memory_version"
fi

# The unmodified E2B JS SDK that the E2B API's test drives (server/
# e2b_test.go), at the version pinned in server/testdata/e2b's lock file,
# installed under the same git-ignored directory. It needs node 20.18.1
# or later; with an older node the test skips and says so.
e2b_src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/server/testdata/e2b"
e2b_dir="$npm_dir/e2b"
if ! cmp -s "$e2b_src/package-lock.json" "$e2b_dir/package-lock.json" || [ ! -d "$e2b_dir/node_modules/e2b" ]; then
	mkdir -p "$e2b_dir"
	cp "$e2b_src/package.json" "$e2b_src/package-lock.json" "$e2b_dir/"
	npm ci --prefix "$e2b_dir" --no-audit --no-fund --loglevel=error
fi

# The native Cove client for the JS Agents SDK (clients/openai-agents-js):
# its pinned TypeScript and @openai/agents, from its lock file, in its own
# git-ignored node_modules. server/agentsjs_client_test.go builds it (and
# installs the same way when this has not run).
client_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/clients/openai-agents-js"
if ! cmp -s "$client_dir/package-lock.json" "$client_dir/node_modules/.cove-lock.json"; then
	npm ci --prefix "$client_dir" --no-audit --no-fund --loglevel=error
	cp "$client_dir/package-lock.json" "$client_dir/node_modules/.cove-lock.json"
fi

# The unmodified OpenAI Agents SDK (@openai/agents, and the E2B sandbox
# client of @openai/agents-extensions with its e2b peer) that the Agents
# SDK's test drives (server/agents_sdk_test.go), pinned by server/
# testdata/agents' lock file, installed the same way.
agents_src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/server/testdata/agents"
agents_dir="$npm_dir/agents"
if ! cmp -s "$agents_src/package-lock.json" "$agents_dir/package-lock.json" || [ ! -d "$agents_dir/node_modules/@openai/agents" ]; then
	mkdir -p "$agents_dir"
	cp "$agents_src/package.json" "$agents_src/package-lock.json" "$agents_dir/"
	(cd "$agents_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
