package server

import (
	"crypto/cipher"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/runs"
)

// Agent runs (/v1/runs) and team secrets (/v1/secrets): the HTTP side of
// package runs. These handlers decode, call the service and write its
// answer; a run's log goes out as Server-Sent Events.

// ModelConfig is the model endpoint runs use unless they name another.
type ModelConfig = runs.ModelConfig

func (s *Server) runRoutes() {
	s.handle("POST /v1/runs", s.createRun)
	s.handle("GET /v1/runs", s.listRuns)
	s.handle("GET /v1/runs/{id}", s.getRun)
	s.handle("GET /v1/runs/{id}/events", s.runEvents)
	s.handle("POST /v1/runs/{id}/approvals", s.decideRun)
	s.handle("POST /v1/runs/{id}/messages", s.messageRun)
	s.handle("POST /v1/runs/{id}/cancel", s.cancelRun)
	s.handle("DELETE /v1/runs/{id}", s.deleteRun)
	s.handle("GET /v1/model", s.modelInfo)
}

func (s *Server) secretRoutes() {
	s.handle("PUT /v1/secrets/{name}", s.putSecret)
	s.handle("GET /v1/secrets", s.listSecrets)
	s.handle("DELETE /v1/secrets/{name}", s.deleteSecret)
}

// aead seals the web UI's session cookies, under the same key as team
// secrets.
func (s *Server) aead() (cipher.AEAD, error) { return s.runs.Sealer() }

func (s *Server) createRun(w http.ResponseWriter, r *http.Request, c *caller) {
	req, tarFile, ok := s.decodeCreateRun(w, r)
	if !ok {
		return
	}
	var workspace io.Reader
	if tarFile != nil {
		defer func() {
			tarFile.Close()
			os.Remove(tarFile.Name())
		}()
		workspace = tarFile
	}
	run, err := s.runs.Create(r.Context(), c.team, req, workspace)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, run)
}

// decodeCreateRun reads POST /v1/runs: JSON, or multipart/form-data with
// a "run" part (the JSON) and a "workspace" part (a tar), spooled and
// checked before anything is made.
func (s *Server) decodeCreateRun(w http.ResponseWriter, r *http.Request) (api.CreateRun, *os.File, bool) {
	var req api.CreateRun
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		return req, nil, s.decode(w, r, &req)
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes+s.cfg.MaxBodyBytes)
	mr, err := r.MultipartReader()
	if err != nil {
		s.fail(w, r, invalid("reading the multipart body: %v", err))
		return req, nil, false
	}
	var tarFile *os.File
	fail := func(err error) (api.CreateRun, *os.File, bool) {
		if tarFile != nil {
			tarFile.Close()
			os.Remove(tarFile.Name())
		}
		s.fail(w, r, err)
		return req, nil, false
	}
	gotRun := false
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(invalid("reading the multipart body: %v", err))
		}
		switch p.FormName() {
		case "run":
			if gotRun {
				return fail(invalid("the \"run\" part is given twice"))
			}
			gotRun = true
			if err := decodeJSON(io.LimitReader(p, s.cfg.MaxBodyBytes), &req); err != nil {
				return fail(invalid("the \"run\" part: %s", jsonMessage(err)))
			}
		case "workspace":
			if tarFile != nil {
				return fail(invalid("the \"workspace\" part is given twice"))
			}
			tarFile, err = s.spoolTar(p)
			if err != nil {
				return fail(fmt.Errorf("the \"workspace\" part: %w", err))
			}
		default:
			return fail(invalid("unknown part %q: send \"run\" (JSON) and \"workspace\" (a tar)", p.FormName()))
		}
	}
	if !gotRun {
		return fail(invalid("no \"run\" part: send the run's JSON as a form field named run"))
	}
	return req, tarFile, true
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, c *caller) {
	run, err := s.runs.Get(r.Context(), c.team, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	o := runs.ListOptions{Status: q.Get("status"), After: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			s.fail(w, r, invalid("limit %q: want a positive number", v))
			return
		}
		o.Limit = n
	}
	list, err := s.runs.List(r.Context(), c.team, o)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// runExists answers 404 for a run the caller's team does not have. The
// control operations ask it before reading the body: another team's run
// is a 404 whatever the body says.
func (s *Server) runExists(w http.ResponseWriter, r *http.Request, c *caller) bool {
	if _, err := s.runs.Get(r.Context(), c.team, r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return false
	}
	return true
}

func (s *Server) decideRun(w http.ResponseWriter, r *http.Request, c *caller) {
	var req api.RunDecisions
	if !s.runExists(w, r, c) || !s.decode(w, r, &req) {
		return
	}
	run, err := s.runs.Decide(r.Context(), c.team, r.PathValue("id"), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

func (s *Server) messageRun(w http.ResponseWriter, r *http.Request, c *caller) {
	var req api.RunMessage
	if !s.runExists(w, r, c) || !s.decode(w, r, &req) {
		return
	}
	run, err := s.runs.Message(r.Context(), c.team, r.PathValue("id"), req.Input)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request, c *caller) {
	run, err := s.runs.Cancel(r.Context(), c.team, r.PathValue("id"))
	if err != nil {
		if r.Context().Err() != nil {
			return // the client left while the run stopped
		}
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

func (s *Server) deleteRun(w http.ResponseWriter, r *http.Request, c *caller) {
	if err := s.runs.Delete(r.Context(), c.team, r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// runEvents streams a run's log as Server-Sent Events from after the
// client's Last-Event-ID (or ?after=). The stream ends once the run is not
// working and everything is sent, unless ?follow=true keeps it open
// across follow-ups (with a comment every 15 s to keep proxies from
// closing it).
func (s *Server) runEvents(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	from := r.Header.Get("Last-Event-ID")
	if v := q.Get("after"); v != "" {
		from = v
	}
	var after int64
	if from != "" {
		n, err := strconv.ParseInt(from, 10, 64)
		if err != nil || n < 0 {
			s.fail(w, r, invalid("event id %q: want the number of the last event seen (0 for all)", from))
			return
		}
		after = n
	}
	follow := q.Get("follow") == "true" || q.Get("follow") == "1"
	feed, err := s.runs.Events(r.Context(), c.team, r.PathValue("id"), after)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer feed.Close()
	ctx, cancel := s.streamContext(r.Context())
	defer cancel()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sse := &sseWriter{w: w}
	sse.flusher, _ = w.(http.Flusher)
	io.WriteString(w, "retry: 2000\n\n")
	sse.flush()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		b, err := feed.Next(ctx)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				s.log.Error("reading run events", "run", r.PathValue("id"), "err", err)
				fmt.Fprintf(w, "event: error\ndata: {\"type\":\"error\",\"error\":%q}\n\n", "reading the run's events failed; reconnect with Last-Event-ID")
			}
			return
		case b.Deleted:
			return
		case len(b.Events) > 0:
			if !sse.send(b) {
				return
			}
			continue
		case !follow && !b.Working:
			return
		}
		select {
		case <-b.Changed:
		case <-ctx.Done():
			return
		case <-keepalive.C:
			if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil {
				return
			}
			sse.flush()
		}
	}
}

// sseWriter writes a run's events as Server-Sent Events.
type sseWriter struct {
	w       io.Writer
	flusher http.Flusher
}

// send writes b's events and flushes them: false when the client is gone.
func (s *sseWriter) send(b runs.Batch) bool {
	for _, e := range b.Events {
		if _, err := fmt.Fprintf(s.w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, e.Data); err != nil {
			return false
		}
	}
	s.flush()
	return true
}

func (s *sseWriter) flush() {
	if s.flusher != nil {
		s.flusher.Flush()
	}
}

func (s *Server) putSecret(w http.ResponseWriter, r *http.Request, c *caller) {
	name := r.PathValue("name")
	var req api.SetSecret
	if !s.decode(w, r, &req) {
		return
	}
	sec, err := s.runs.PutSecret(r.Context(), c.team, name, req.Value)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sec)
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request, c *caller) {
	secs, err := s.runs.ListSecrets(r.Context(), c.team)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.SecretList{Secrets: secs})
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request, c *caller) {
	if err := s.runs.DeleteSecret(r.Context(), c.team, r.PathValue("name")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
