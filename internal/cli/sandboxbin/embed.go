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

// BinarySum and ShimSum are the hex SHA-256 of Binary and Shim, written
// by make build beside them, so that no start of cove hashes 25 MB to name
// and check its installed copies.
//
//go:embed cove-sandbox.sha256
var BinarySum string

//go:embed cove-shim.sha256
var ShimSum string
