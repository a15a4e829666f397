package guest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pb "github.com/cove-sandbox/cove/guest/gen/process"
)

// The process service's server streams (Start, Connect) are the exec hot
// path, so the client speaks the Connect streaming protocol for them
// directly: one HTTP/1.1 request with a fixed-length body and a buffered
// read of the response's envelopes. connect-go's generic client pipes the
// request body through extra goroutines, which measured about 0.1 ms per
// exec here. The wire format is the same, so the daemon sees an ordinary
// Connect call.

const (
	envelopeEndStream = 0x02
	maxEnvelope       = 16 << 20
)

// procEventStream reads ProcessEvents from a Start or Connect response.
type procEventStream struct {
	body io.ReadCloser
	br   *bufio.Reader
	msg  *pb.ProcessEvent
	err  error
	hdr  [5]byte
	buf  []byte
}

// openStream calls procedure (e.g. "/process.Process/Start") with msg and
// returns the event stream. The request is bound to ctx.
func (c *Client) openStream(ctx context.Context, procedure string, msg proto.Message, header http.Header) (*procEventStream, error) {
	data, err := proto.Marshal(msg)
	if err != nil {
		return nil, err
	}
	body := make([]byte, 5+len(data))
	binary.BigEndian.PutUint32(body[1:5], uint32(len(data)))
	copy(body[5:], data)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+procedure, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/connect+proto")
	req.Header.Set("Connect-Protocol-Version", "1")
	c.setHeaders(req.Header)
	resp, err := c.bulk.Do(req)
	if err != nil {
		return nil, wireError(err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, fmt.Errorf("%s: %w", procedure, httpError(resp))
	}
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(resp.Body)
	return &procEventStream{body: resp.Body, br: br}, nil
}

// readerPool holds the streams' read buffers: one per exec would be most
// of what an exec allocates, and the garbage collector's work competes
// for the CPU with the commands.
var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// Receive reads the next event; false at the end of the stream or on an
// error (see Err).
func (s *procEventStream) Receive() bool {
	if s.err != nil {
		return false
	}
	if _, err := io.ReadFull(s.br, s.hdr[:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // a stream must end with an end-stream envelope
		}
		s.err = err
		return false
	}
	n := binary.BigEndian.Uint32(s.hdr[1:5])
	if n > maxEnvelope {
		s.err = fmt.Errorf("the sandbox daemon sent a %d-byte message, over the %d-byte limit", n, maxEnvelope)
		return false
	}
	if cap(s.buf) < int(n) {
		s.buf = make([]byte, n)
	}
	buf := s.buf[:n]
	if _, err := io.ReadFull(s.br, buf); err != nil {
		s.err = err
		return false
	}
	if s.hdr[0]&envelopeEndStream != 0 {
		s.err = endStreamError(buf)
		if s.err == nil {
			s.err = io.EOF
		}
		return false
	}
	if s.hdr[0] != 0 {
		s.err = fmt.Errorf("the sandbox daemon sent a compressed or unknown envelope (flags %#x)", s.hdr[0])
		return false
	}
	// StartResponse and ConnectResponse share one shape: event = 1.
	var r pb.StartResponse
	if err := proto.Unmarshal(buf, &r); err != nil {
		s.err = fmt.Errorf("decoding a process event: %w", err)
		return false
	}
	s.msg = r.Event
	return true
}

// Msg is the event Receive read.
func (s *procEventStream) Msg() *pb.ProcessEvent { return s.msg }

// Err is the error that ended the stream; nil at a clean end.
func (s *procEventStream) Err() error {
	if s.err == io.EOF {
		return nil
	}
	return s.err
}

// Close releases the response.
//
// After a clean end the response's last bytes (the chunked terminator)
// are read first: a body closed before its EOF costs the connection, and
// the next exec would dial the daemon again.
func (s *procEventStream) Close() error {
	if s.br == nil {
		return nil
	}
	if s.err == io.EOF {
		io.Copy(io.Discard, io.LimitReader(s.br, 4<<10))
	}
	err := s.body.Close()
	s.br.Reset(nil)
	readerPool.Put(s.br)
	s.br = nil
	if s.err == nil {
		s.err = errors.New("the stream is closed")
	}
	return err
}

// endStreamError decodes Connect's end-of-stream JSON.
func endStreamError(data []byte) error {
	var end struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &end); err != nil {
		return fmt.Errorf("decoding the end of a process stream: %w", err)
	}
	if end.Error == nil {
		return nil
	}
	var code connect.Code
	if err := code.UnmarshalText([]byte(end.Error.Code)); err != nil {
		code = connect.CodeUnknown
	}
	return connect.NewError(code, errors.New(end.Error.Message))
}
