package guest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/cove-sandbox/cove/guest/internal/wire"
)

// The daemon's header names, for the runtimes and proxies that speak to
// it directly; see package wire for what each does.
const (
	AccessTokenHeader = wire.AccessTokenHeader
	ConfineHeader     = wire.ConfineHeader
	NoReplaceHeader   = wire.NoReplaceHeader
	StreamHeader      = wire.StreamHeader
	DetachedHeader    = wire.DetachedHeader
	KillAfterHeader   = wire.KillAfterHeader
	WorkdirHeader     = wire.WorkdirHeader
	SudoHeader        = wire.SudoHeader
)

// httpError reads envd's {"message","code"} error body and maps the
// status to a sandbox sentinel.
func httpError(resp *http.Response) error {
	var body struct {
		Message string `json:"message"`
		Code    int    `json:"code"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(data, &body) != nil || body.Message == "" {
		body.Message = strings.TrimSpace(string(data))
		if body.Message == "" {
			body.Message = resp.Status
		}
	}
	s := wire.SentinelForStatus(resp.StatusCode)
	if s == nil {
		return fmt.Errorf("sandbox daemon: HTTP %d: %s", resp.StatusCode, body.Message)
	}
	return wire.WithSentinel(body.Message, s)
}
