# Cove's two entry points on a fresh Debian 12 machine:
#   make run   - install what running needs, build, and run Cove's main job on
#                embedded defaults (cove serve)
#   make test  - install what the tests need as well, then vet and test everything
SHELL := /bin/bash
GO ?= go
GOBIN ?= $(shell $(GO) env GOPATH)/bin
export PATH := $(GOBIN):/usr/local/go/bin:$(PATH)

.PHONY: run test deps deps-run deps-test build generate bench fuzz image

# deps-run installs what building Cove and running cove serve need;
# deps-test adds what only the tests need (chromium, node and the npm
# SDKs, pytest, ...). deps is all of it.
deps-run:
	@./scripts/deps.sh run

deps-test deps:
	@./scripts/deps.sh test

# A static binary starts about 1 ms faster, and every sandbox start runs
# two: its supervisor (cmd/cove-shim) and its pid 1 (cmd/cove-sandbox),
# embedded in cove, each linking only what its role needs, so a sandbox
# initialises neither the harness's packages nor the other role's. Their
# checksums are embedded too: cove then never hashes 25 MB to start.
# bin/cove is the front (internal/cli/front): it runs cove sandbox and
# cove version itself, linking only the runtimes, and hands every other
# command to the full cove it carries compressed, so a one-shot CLI
# command does not start the server's, harness's and store's packages.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -o internal/cli/sandboxbin/cove-sandbox ./cmd/cove-sandbox
	CGO_ENABLED=0 $(GO) build -trimpath -o internal/cli/sandboxbin/cove-shim ./cmd/cove-shim
	cd internal/cli/sandboxbin && for p in cove-sandbox cove-shim; do sha256sum $$p | cut -d' ' -f1 >$$p.sha256; done
	CGO_ENABLED=0 $(GO) build -tags embedsandbox -o bin/cove-full ./cmd/cove
	gzip -1 -c bin/cove-full >cmd/cove/cove-full.gz
	sha256sum bin/cove-full | cut -d' ' -f1 >cmd/cove/cove-full.sha256
	CGO_ENABLED=0 $(GO) build -tags front,embedsandbox -o bin/cove ./cmd/cove
	rm -f bin/cove-full

# image writes the Cove server as a container image for deploy/kubernetes.
image: build
	./bin/cove image server --output bin/cove-server.tar

run: deps-run build
	./bin/cove serve

test: deps-test
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 45m ./...

bench: build
	$(GO) test -run='^$$' -bench=. -benchtime=2s ./guest/
	$(GO) test -run='^$$' -bench=. -benchtime=100x ./sandbox/local/
	$(GO) test -run='^$$' -bench=HarnessOverhead -benchtime=20x ./agent/
	$(GO) test -run='^$$' -bench=HarnessOverhead -benchtime=20x ./agent/
	./bin/cove bench

# generate rebuilds the Connect/protobuf code from guest/proto.
generate:
	@command -v protoc >/dev/null || { apt-get update -qq && apt-get install -y -qq protobuf-compiler; }
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	$(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
	cd guest/proto && protoc -I . \
		--go_out=../gen --go_opt=module=github.com/cove-sandbox/cove/guest/gen \
		--connect-go_out=../gen --connect-go_opt=module=github.com/cove-sandbox/cove/guest/gen \
		process/process.proto filesystem/filesystem.proto

fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=30s ./manifest
	$(GO) test -run='^$$' -fuzz=FuzzExtract -fuzztime=30s ./sandbox/tarball
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=30s ./agent/tool/applypatch
	$(GO) test -run='^$$' -fuzz=FuzzApply -fuzztime=30s ./agent/tool/applypatch
