package manifest

import (
	"context"

	"github.com/cove-sandbox/cove/sandbox"
)

// The process calls by pid or tag, which applying a manifest never makes.

func (f *fakeSession) StartDetached(ctx context.Context, req sandbox.ExecRequest) (int, error) {
	return 0, errNotImplemented
}

func (f *fakeSession) Signal(ctx context.Context, sel sandbox.ProcessSelector, sig sandbox.Signal) error {
	return errNotImplemented
}

func (f *fakeSession) WriteStdin(ctx context.Context, sel sandbox.ProcessSelector, p []byte) error {
	return errNotImplemented
}

func (f *fakeSession) CloseStdin(ctx context.Context, sel sandbox.ProcessSelector) error {
	return errNotImplemented
}
