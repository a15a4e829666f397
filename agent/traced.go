package agent

import (
	"context"
	"io"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cove-sandbox/cove/sandbox"
)

// traced wraps the session the tools use so every sandbox operation is a
// span ("sandbox.exec", "sandbox.read", ...) under the tool call's span.
// Without a tracer provider the spans are no-ops.
type traced struct {
	sandbox.Session
}

func span(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

func end(s trace.Span, err error) {
	if err != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}

func (t traced) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExitStatus, error) {
	ctx, s := span(ctx, "sandbox.exec", attribute.String("cmd", req.Cmd))
	st, err := t.Session.Exec(ctx, req)
	s.SetAttributes(attribute.Int("exit_code", st.Code))
	end(s, err)
	return st, err
}

func (t traced) Start(ctx context.Context, req sandbox.ExecRequest) (sandbox.Process, error) {
	ctx, s := span(ctx, "sandbox.start", attribute.String("cmd", req.Cmd))
	p, err := t.Session.Start(ctx, req)
	end(s, err)
	return p, err
}

func (t traced) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	ctx, s := span(ctx, "sandbox.read", attribute.String("path", p))
	rc, err := t.Session.ReadFile(ctx, p)
	end(s, err)
	return rc, err
}

func (t traced) WriteFile(ctx context.Context, p string, r io.Reader, perm uint32) error {
	ctx, s := span(ctx, "sandbox.write", attribute.String("path", p))
	err := t.Session.WriteFile(ctx, p, r, perm)
	end(s, err)
	return err
}

func (t traced) Stat(ctx context.Context, p string) (sandbox.FileInfo, error) {
	ctx, s := span(ctx, "sandbox.stat", attribute.String("path", p))
	fi, err := t.Session.Stat(ctx, p)
	end(s, err)
	return fi, err
}

func (t traced) List(ctx context.Context, p string, depth int) ([]sandbox.FileInfo, error) {
	ctx, s := span(ctx, "sandbox.list", attribute.String("path", p))
	fi, err := t.Session.List(ctx, p, depth)
	end(s, err)
	return fi, err
}

func (t traced) Mkdir(ctx context.Context, p string) error {
	ctx, s := span(ctx, "sandbox.mkdir", attribute.String("path", p))
	err := t.Session.Mkdir(ctx, p)
	end(s, err)
	return err
}

func (t traced) Remove(ctx context.Context, p string) error {
	ctx, s := span(ctx, "sandbox.remove", attribute.String("path", p))
	err := t.Session.Remove(ctx, p)
	end(s, err)
	return err
}

func (t traced) Move(ctx context.Context, src, dst string) error {
	ctx, s := span(ctx, "sandbox.move", attribute.String("src", src), attribute.String("dst", dst))
	err := t.Session.Move(ctx, src, dst)
	end(s, err)
	return err
}

func (t traced) SnapshotWorkspace(ctx context.Context, w io.Writer) error {
	ctx, s := span(ctx, "sandbox.snapshot")
	err := t.Session.SnapshotWorkspace(ctx, w)
	end(s, err)
	return err
}

func (t traced) RestoreWorkspace(ctx context.Context, r io.Reader) error {
	ctx, s := span(ctx, "sandbox.restore")
	err := t.Session.RestoreWorkspace(ctx, r)
	end(s, err)
	return err
}
