#!/usr/bin/env bash
# Installs what building and testing Cove needs on a fresh Debian 12
# machine. Idempotent: it only installs what is missing.
set -euo pipefail

need=()
command -v git >/dev/null || need+=(git)
command -v stty >/dev/null || need+=(coreutils)
command -v make >/dev/null || need+=(make)
[ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
# The local runtime's capped disks are ext4 images; templates are built
# from Debian packages.
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v cp >/dev/null || need+=(coreutils)
# Tests use pkill (procps) and dpkg-deb (dpkg).
command -v pkill >/dev/null || need+=(procps)
command -v dpkg-deb >/dev/null || need+=(dpkg)
# The agent's end-to-end test runs pytest inside a sandbox on the host
# template, which sees the host's /usr.
/usr/bin/python3 -c 'import pytest' 2>/dev/null || need+=(python3 python3-pytest)
# E2B sandboxes on the host template get the daemon's sudo bound over
# the host's /usr/bin/sudo, which must exist for that (guest/sudo.go).
[ -e /usr/bin/sudo ] || need+=(sudo)
# The MCP adapter's tests run a real npm MCP server with node.
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
# The web UI's browser tests drive Debian's chromium headless (server).
[ -x /usr/bin/chromium ] || need+=(chromium)
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
