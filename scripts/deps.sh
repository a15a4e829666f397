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
	# The MCP adapter's tests run a real npm MCP server with node; the E2B
	# and Agents SDK tests run the SDKs with node.
	have node || need+=(nodejs)
	have npm || need+=(npm)
	# The web UI's browser tests drive Debian's chromium headless (server).
	[ -x /usr/bin/chromium ] || need+=(chromium)
fi
if ((${#need[@]})); then
	if [ "$(id -u)" -ne 0 ]; then
		echo "deps: missing ${need[*]}; run as root or install them with apt-get" >&2
		exit 1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
	export PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null || { echo "deps: Go 1.26 is required (expected at /usr/local/go)" >&2; exit 1; }
go mod download

[ "$mode" = test ] || exit 0

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
