package procs

import (
	"context"
	"net/http"
	"sync/atomic"
)

// lastFlushWriter lets a process stream hold back the flushes that follow
// its last event. Connect flushes after every message and again after the
// end of the stream; held, the end event, the end of the stream and the
// end of the HTTP response leave in one write when the handler returns
// (and reach the client in one read) instead of three.
type lastFlushWriter struct {
	http.ResponseWriter
	held atomic.Bool
}

type lastFlushKey struct{}

func (w *lastFlushWriter) Flush() {
	if w.held.Load() {
		return
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *lastFlushWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// WithLastFlush gives h's handlers a lastFlushWriter through their context
// (see holdFlushes).
func WithLastFlush(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lw := &lastFlushWriter{ResponseWriter: w}
		h.ServeHTTP(lw, r.WithContext(context.WithValue(r.Context(), lastFlushKey{}, lw)))
	})
}

// holdFlushes stops flushing the response of ctx's request: what is
// written from now on leaves when the handler returns. Only for a
// handler's last message.
func holdFlushes(ctx context.Context) {
	if w, ok := ctx.Value(lastFlushKey{}).(*lastFlushWriter); ok {
		w.held.Store(true)
	}
}
