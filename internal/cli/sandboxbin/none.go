//go:build !embedsandbox

package sandboxbin

// Binary is empty in a build without -tags embedsandbox.
var Binary []byte
