// Package sandboxbin carries the cove-sandbox program inside cove when it
// is built with -tags embedsandbox (make build does: it builds
// cmd/cove-sandbox into this directory first). Without the tag it is
// empty and cove runs the sandbox roles itself.
package sandboxbin
