package sandboxtool

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/sandbox"
)

// MaxImageBytes is the largest image view_image returns, as the SDK's.
const MaxImageBytes = 10 << 20

// imageType names an image's media type from its first bytes, or "". Only
// the formats the models' image inputs accept are recognised: the SDK also
// passes BMP, TIFF and SVG, which a provider then rejects with an error
// that ends the turn rather than one the model can act on.
func imageType(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case bytes.HasPrefix(b, []byte("\xff\xd8\xff")):
		return "image/jpeg"
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return "image/gif"
	case len(b) >= 12 && bytes.HasPrefix(b, []byte("RIFF")) && string(b[8:12]) == "WEBP":
		return "image/webp"
	}
	return ""
}

func (t *Tools) viewImage(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	f, err := parseObject("view_image", call.Arguments, `{"path": "chart.png"}`)
	if err != nil {
		return agent.ToolResult{}, err
	}
	p, err := f.str("path")
	if err != nil {
		return agent.ToolResult{}, err
	}
	if p == "" {
		return agent.ToolResult{}, fmt.Errorf(`view_image: "path" is required: give the image's path in the workspace, as in {"path": "chart.png"}: %w`, sandbox.ErrInvalid)
	}
	rc, err := t.sess.ReadFile(ctx, t.resolve(p))
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return agent.ToolResult{}, fmt.Errorf("view_image: image path `%s` was not found: %w", p, err)
	case err != nil:
		return agent.ToolResult{}, fmt.Errorf("view_image: unable to read image at `%s`: %w", p, err)
	}
	defer rc.Close()
	// One byte past the limit tells a file at the limit from a bigger one
	// without reading the rest of it.
	data, err := io.ReadAll(io.LimitReader(rc, MaxImageBytes+1))
	if err != nil {
		return agent.ToolResult{}, fmt.Errorf("view_image: unable to read image at `%s`: %w", p, err)
	}
	if len(data) > MaxImageBytes {
		return agent.ToolResult{}, fmt.Errorf("view_image: image path `%s` exceeded the allowed size of 10MB; resize or compress the image and try again: %w", p, sandbox.ErrLimit)
	}
	mime := imageType(data)
	if mime == "" {
		return agent.ToolResult{}, fmt.Errorf("view_image: image path `%s` is not a supported image file; PNG, JPEG, GIF and WEBP images can be viewed: %w", p, sandbox.ErrInvalid)
	}
	url := "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(data)
	return agent.ToolResult{Output: []agent.Content{{Type: agent.ContentImage, ImageURL: url}}}, nil
}
