// Package sandboxbin carries the sandbox programs inside cove when it is
// built with -tags embedsandbox (make build does: it builds them into this
// directory first): cmd/cove-sandbox (the in-sandbox daemon and the local
// runtime's pid 1) and cmd/cove-shim (the local runtime's supervisor).
// Without the tag it is empty and cove runs these roles itself.
package sandboxbin
