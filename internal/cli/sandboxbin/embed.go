//go:build embedsandbox

package sandboxbin

import _ "embed"

// Binary is cmd/cove-sandbox, built for this platform.
//
//go:embed cove-sandbox
var Binary []byte

// Shim is cmd/cove-shim, built for this platform.
//
//go:embed cove-shim
var Shim []byte
