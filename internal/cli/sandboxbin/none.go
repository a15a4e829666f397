//go:build !embedsandbox

package sandboxbin

// Binary and Shim are empty in a build without -tags embedsandbox.
var Binary, Shim []byte

// BinarySum and ShimSum are empty in a build without -tags embedsandbox.
var BinarySum, ShimSum string
