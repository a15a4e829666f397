package remote

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/cove-sandbox/cove/api"
)

// Retry policy, of a Runtime's API calls (not of a session's calls to
// its daemon: streams and tunnels). A request the server may not have done, or may do again
// safely, is retried when the connection fails or a proxy in front
// answers that no server could (502, 503, 504): GET, HEAD, PUT, DELETE
// and OPTIONS (idempotent by HTTP's rules, and Cove's routes keep them
// so), and a POST carrying an Idempotency-Key (Create makes one per
// sandbox), whose retries the server answers with the first one's
// result. Other POSTs (exec, stop, fork, ...) are never retried: the
// server may have done them. Retries back off from retryFirst, doubling
// to retryMost, with jitter, until DefaultMaxRetryTime has passed since
// the first try, or ctx ends.
const (
	// DefaultMaxRetryTime bounds a request's retries; it outlasts a
	// replica's restart behind a balancer and the hold of a dead
	// replica's idempotency claim.
	DefaultMaxRetryTime = 30 * time.Second
	retryFirst          = 50 * time.Millisecond
	retryMost           = 2 * time.Second
)

// retrier is an http.RoundTripper that retries by the policy above.
type retrier struct {
	base    http.RoundTripper
	maxTime time.Duration
	// sleep waits d or until ctx ends (tests need not replace it).
	sleep func(ctx context.Context, d time.Duration) error
}

// RetryingClient returns a client like hc whose requests are retried by
// the Runtime's policy (above) for up to maxTime (0: DefaultMaxRetryTime;
// negative: hc itself), for callers of the REST API that do not go
// through a Runtime. A POST is retried only with an Idempotency-Key the
// caller set.
func RetryingClient(hc *http.Client, maxTime time.Duration) *http.Client {
	return retrying(hc, maxTime)
}

// retrying returns a client like hc whose transport retries (maxTime <
// 0: hc itself).
func retrying(hc *http.Client, maxTime time.Duration) *http.Client {
	if maxTime < 0 {
		return hc
	}
	if maxTime == 0 {
		maxTime = DefaultMaxRetryTime
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c := *hc
	c.Transport = &retrier{base: base, maxTime: maxTime, sleep: sleepCtx}
	return &c
}

// retryable says whether req may be sent again.
func retryable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false // a stream: it cannot be sent twice
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions:
		return true
	case http.MethodPost:
		return req.Header.Get(api.IdempotencyKeyHeader) != ""
	}
	return false
}

func (rt *retrier) RoundTrip(req *http.Request) (*http.Response, error) {
	if !retryable(req) {
		return rt.base.RoundTrip(req)
	}
	ctx := req.Context()
	start := time.Now()
	wait := retryFirst
	for attempt := 0; ; attempt++ {
		try := req
		if attempt > 0 {
			try = req.Clone(ctx)
			if req.GetBody != nil {
				body, err := req.GetBody()
				if err != nil {
					return nil, err
				}
				try.Body = body
			}
		}
		if attempt > 0 {
			if n, ok := ctx.Value(retriesKey{}).(*atomic.Int32); ok {
				n.Add(1)
			}
		}
		resp, err := rt.base.RoundTrip(try)
		if !rt.again(resp, err) || ctx.Err() != nil || time.Since(start)+wait > rt.maxTime {
			return resp, err
		}
		if resp != nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		// Full jitter over the upper half: clients cut by one kill do
		// not all come back at once.
		d := wait/2 + rand.N(wait/2+1)
		if err := rt.sleep(ctx, d); err != nil {
			return nil, err
		}
		wait = min(2*wait, retryMost)
	}
}

// again says whether an answer calls for another try: no connection, a
// proxy's "no server", or the server's "the first request with this key
// is still in flight". The 409's body is kept readable otherwise.
func (rt *retrier) again(resp *http.Response, err error) bool {
	if err != nil {
		return true
	}
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusConflict:
		if resp.Request == nil || resp.Request.Header.Get(api.IdempotencyKeyHeader) == "" {
			return false
		}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(data), resp.Body), resp.Body}
		var e api.Error
		return json.Unmarshal(data, &e) == nil && e.Code == api.CodeIdempotencyInFlight
	}
	return false
}

// retriesKey is the context key of a counter of a request's retries
// (withRetries).
type retriesKey struct{}

// withRetries returns a ctx whose requests count their retries in n: a
// caller to whom "already done" is success (a delete answered 404 on a
// retry) tells a retry's answer from a first one.
func withRetries(ctx context.Context, n *atomic.Int32) context.Context {
	return context.WithValue(ctx, retriesKey{}, n)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// newIdempotencyKey is a fresh key for one create: 128 random bits.
func newIdempotencyKey() string {
	b := make([]byte, 16)
	crand.Read(b)
	return hex.EncodeToString(b)
}
