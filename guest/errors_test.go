package guest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/cove-sandbox/cove/guest/gen/process"
	"github.com/cove-sandbox/cove/guest/gen/process/processconnect"
	"github.com/cove-sandbox/cove/guest/internal/wire"
	"github.com/cove-sandbox/cove/sandbox"
)

var sentinels = []error{
	sandbox.ErrNotFound, sandbox.ErrInvalid, sandbox.ErrExist, sandbox.ErrState,
	sandbox.ErrLimit, sandbox.ErrUnavailable, sandbox.ErrPermission,
}

// failingProcess answers List with the error of the request's sentinel,
// as the daemon's handlers do (connectError).
type failingProcess struct {
	processconnect.UnimplementedProcessHandler
	err error
}

func (f failingProcess) List(context.Context, *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	return nil, wire.ConnectError(f.err)
}

// TestSentinelsRoundTrip: every sandbox sentinel the daemon answers with
// comes back to the client as the same sentinel, in both of the daemon's
// wire forms (a Connect error, an envd HTTP error), so none is a bare
// internal error.
func TestSentinelsRoundTrip(t *testing.T) {
	for _, sentinel := range sentinels {
		t.Run(sentinel.Error(), func(t *testing.T) {
			err := fmt.Errorf("doing something: %w", sentinel)
			if !wire.HasSentinel(err) || wire.HTTPStatus(err) == http.StatusInternalServerError || wire.CodeFor(err) == connect.CodeInternal {
				t.Errorf("%v: not in the table (status %d, code %v)", sentinel, wire.HTTPStatus(err), wire.CodeFor(err))
			}
			mux := http.NewServeMux()
			mux.Handle(processconnect.NewProcessHandler(failingProcess{err: err}))
			mux.HandleFunc("GET /files", func(w http.ResponseWriter, r *http.Request) {
				wire.WriteError(w, wire.HTTPStatus(err), err.Error())
			})
			l, lerr := net.Listen("tcp", "127.0.0.1:0")
			if lerr != nil {
				t.Fatal(lerr)
			}
			hs := &http.Server{Handler: mux}
			go hs.Serve(l)
			defer hs.Close()
			c, cerr := NewClient("http://"+l.Addr().String(), ClientOptions{})
			if cerr != nil {
				t.Fatal(cerr)
			}
			defer c.Close()
			s := NewSession(c, SessionOptions{ID: "sb"})

			_, got := s.Processes(t.Context())
			if !errors.Is(got, sentinel) {
				t.Errorf("through Connect: got %v, want %v", got, sentinel)
			}
			if want := "doing something: " + sentinel.Error(); got == nil || !strings.HasSuffix(got.Error(), want) || strings.Count(got.Error(), sentinel.Error()) != 1 {
				t.Errorf("through Connect: got %q, want it to end in %q, the sentinel's text once", got, want)
			}
			_, got = s.ReadFile(t.Context(), "f")
			if !errors.Is(got, sentinel) {
				t.Errorf("through envd's HTTP errors: got %v, want %v", got, sentinel)
			}
			if want := "doing something: " + sentinel.Error(); got == nil || !strings.HasSuffix(got.Error(), want) || strings.Count(got.Error(), sentinel.Error()) != 1 {
				t.Errorf("through envd's HTTP errors: got %q, want it to end in %q, the sentinel's text once", got, want)
			}
			for _, other := range sentinels {
				if other != sentinel && errors.Is(got, other) {
					t.Errorf("through envd's HTTP errors: got %v, which is also %v", got, other)
				}
			}
		})
	}
}
