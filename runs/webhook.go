package runs

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/egress"
)

// Webhooks tell a run's caller (a no-code tool, a CI job) that it
// stopped: idle with its answer, waiting for approvals, failed or
// cancelled. The body is api.RunWebhook; Cove-Signature carries
// t=UNIX,v1=HEX, HEX being the HMAC-SHA256 under the run's webhook secret
// of "UNIX.BODY" (the scheme Stripe uses, which the no-code tools know how
// to check). A delivery that fails (no answer, or a status that is not
// 2xx) is tried again after 1 s, 5 s and 25 s.

// webhookDelays are the waits before each retry.
var webhookDelays = []time.Duration{time.Second, 5 * time.Second, 25 * time.Second}

// SignWebhook returns the Cove-Signature header value for body sent at t.
func SignWebhook(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// VerifyWebhook checks a Cove-Signature header against body, refusing
// signatures older than tolerance (replays).
func VerifyWebhook(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return fmt.Errorf("webhook signature %q: want t=UNIX,v1=HEX", header)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("webhook signature is %v old: a replay, or the clocks disagree", d.Round(time.Second))
	}
	want := SignWebhook(secret, time.Unix(sec, 0), body)
	if !hmac.Equal([]byte(want), []byte("t="+ts+",v1="+sig)) {
		return fmt.Errorf("webhook signature does not match the body under this secret")
	}
	return nil
}

// notifyWebhook delivers the run's current view to its webhook, if it has
// one, in the background.
func (s *Service) notifyWebhook(lr *liveRun) {
	lr.mu.Lock()
	var cfg runConfig
	_ = json.Unmarshal(lr.rec.Config, &cfg)
	lr.mu.Unlock()
	if cfg.WebhookURL == "" {
		return
	}
	v := lr.view()
	body, err := json.Marshal(api.RunWebhook{Event: "run." + v.Status, Run: v})
	if err != nil {
		return
	}
	h := s.hub
	if !h.add() {
		return
	}
	go func() {
		defer h.wg.Done()
		s.deliver(h.ctx, lr.id, cfg, body)
	}()
}

// deliver posts body to the run's webhook, retrying. The URL is the
// tenant's, so it is reached under the outbound policy (package egress), and
// nothing the receiver answers goes back to the tenant: only the
// server's log hears how a delivery failed.
func (s *Service) deliver(ctx context.Context, runID string, cfg runConfig, body []byte) {
	client := s.egress.Client()
	for attempt := 0; ; attempt++ {
		err := s.post(ctx, client, cfg, body)
		if err == nil {
			return
		}
		if errors.Is(err, egress.ErrRefused) {
			s.log.Warn("webhook refused by the outbound policy", "run", runID, "url", cfg.WebhookURL, "err", err)
			return
		}
		if attempt >= len(webhookDelays) {
			s.log.Warn("webhook not delivered", "run", runID, "url", cfg.WebhookURL, "attempts", attempt+1, "err", err)
			return
		}
		s.log.Info("webhook failed; retrying", "run", runID, "url", cfg.WebhookURL, "err", err, "in", webhookDelays[attempt])
		select {
		case <-ctx.Done():
			return
		case <-time.After(webhookDelays[attempt]):
		}
	}
}

func (s *Service) post(ctx context.Context, client *http.Client, cfg runConfig, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "cove-webhook/1")
	req.Header.Set("Cove-Signature", SignWebhook(cfg.WebhookSecret, s.cfg.Now(), body))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the webhook answered %s", resp.Status)
	}
	return nil
}
