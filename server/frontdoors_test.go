package server

import (
	"github.com/cove-sandbox/cove/server/e2b"
	"github.com/cove-sandbox/cove/server/internal/proxy"
)

// The E2B front door's bodies, by the names the tests of the whole
// server use.
type (
	e2bSandbox = e2b.Sandbox
	e2bDetail  = e2b.Detail
	e2bListed  = e2b.Listed
)

const e2bEnvdVersion = e2b.EnvdVersion

const (
	e2bSandboxIDHeader   = e2b.SandboxIDHeader
	e2bSandboxPortHeader = e2b.SandboxPortHeader
)

// The headers the proxy drops from an app's response on the UI's origin.
var originWideHeaders = proxy.OriginWideHeaders
