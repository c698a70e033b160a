package fencer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DemotePath is where a failoverd admin API accepts demote requests.
const DemotePath = "/v1/demote"

// DefaultRPCTimeout bounds one demote request when RPCConfig.Timeout is 0.
const DefaultRPCTimeout = 5 * time.Second

// maxDemoteBody bounds demote request and response bodies; both are a few
// dozen bytes of JSON.
const maxDemoteBody = 64 << 10

// DemoteRequest is the body of POST /v1/demote.
type DemoteRequest struct {
	// Reason is for the demoted node's log.
	Reason string `json:"reason"`
	// Epoch is the fencing token of the leadership being ended.
	Epoch int64 `json:"epoch"`
	// From is the node id of the node asking, the one about to take over.
	From string `json:"from"`
}

// DemoteResponse is the answer to POST /v1/demote.
type DemoteResponse struct {
	// Demoted is true only when the service no longer acts as primary.
	Demoted bool `json:"demoted"`
	// NodeID is the answering node's id, so a caller can tell that it
	// demoted the node it meant to.
	NodeID string `json:"node_id"`
	// Epoch is the answering node's last leadership epoch, 0 if none.
	Epoch int64 `json:"epoch"`
	// Error says why the node was not demoted.
	Error string `json:"error,omitempty"`
}

// Demoter is what the daemon's admin API needs to serve POST /v1/demote.
type Demoter interface {
	// Demote makes the local service stop acting as primary now and reports
	// the outcome; Demoted must be false unless that is done.
	Demote(ctx context.Context, reason string) (DemoteResponse, error)
}

// RPCConfig configures the rpc fencing method.
type RPCConfig struct {
	// URL, when set, is the admin API base URL to call instead of the
	// target's (Target.AdminURL, from the breadcrumb).
	URL string
	// Token is the bearer token the target's admin API expects. Required;
	// the caller reads it from a file so it never sits in the config.
	Token string
	// Timeout bounds one request, including reading the answer. Default 5s.
	Timeout time.Duration
	// From is our own node id, sent so the target can log who demoted it.
	From string
	// HTTPClient sends the request. Default: a client that does not follow
	// redirects, so the token and the demand go only where they were meant.
	HTTPClient *http.Client
}

// RPC fences a target gracefully by asking its failoverd to demote the
// service, as Hadoop's ZKFC asks the old active to go standby first.
type RPC struct {
	cfg    RPCConfig
	client *http.Client
	logger *slog.Logger
}

var _ Method = (*RPC)(nil)

// NewRPC validates cfg and applies defaults. A nil logger discards.
func NewRPC(cfg RPCConfig, logger *slog.Logger) (*RPC, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultRPCTimeout
	}
	var errs []error
	if cfg.Token == "" {
		errs = append(errs, errors.New("token is required"))
	}
	if cfg.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout must be > 0, got %s", cfg.Timeout))
	}
	if cfg.URL != "" {
		if _, err := demoteURL(cfg.URL); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &RPC{cfg: cfg, client: client, logger: logger.With("method", "rpc")}, nil
}

// demoteURL turns an admin API base URL into its demote endpoint.
func demoteURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("admin url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("admin url %q: scheme must be http or https", base)
	}
	if u.Host == "" {
		return "", fmt.Errorf("admin url %q has no host", base)
	}
	return strings.TrimRight(u.String(), "/") + DemotePath, nil
}

// Name implements Method.
func (m *RPC) Name() string { return "rpc" }

// Fence implements Method. It returns nil only when the target's admin API
// answers 2xx with "demoted": true, and, when both sides name a node, the
// node that answered is the target.
func (m *RPC) Fence(ctx context.Context, t Target) error {
	base := m.cfg.URL
	if base == "" {
		base = t.AdminURL
	}
	if base == "" {
		return fmt.Errorf("target %q has no admin url and none is configured", t.NodeID)
	}
	endpoint, err := demoteURL(base)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeoutCause(ctx, m.cfg.Timeout,
		fmt.Errorf("no answer within rpc timeout %s: %w", m.cfg.Timeout, context.DeadlineExceeded))
	defer cancel()
	body, err := json.Marshal(DemoteRequest{
		Reason: fmt.Sprintf("fenced by %s: leadership of epoch %d is over", orUnknown(m.cfg.From), t.Epoch),
		Epoch:  t.Epoch,
		From:   m.cfg.From,
	})
	if err != nil {
		return fmt.Errorf("encoding demote request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("building demote request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+m.cfg.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")

	resp, err := m.client.Do(req)
	if err != nil {
		// The error names the URL, which carries no secret: the token is
		// in a header.
		return fmt.Errorf("demote request: %w", ctxCauseOr(ctx, err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxDemoteBody))
	if err != nil {
		return fmt.Errorf("reading demote response from %s: %w", endpoint, ctxCauseOr(ctx, err))
	}
	var answer DemoteResponse
	decodeErr := json.Unmarshal(raw, &answer)

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		if decodeErr == nil && answer.Error != "" {
			return fmt.Errorf("demote request to %s: %s: %s", endpoint, resp.Status, answer.Error)
		}
		return fmt.Errorf("demote request to %s: %s: %q", endpoint, resp.Status, snippet(raw))
	}
	if decodeErr != nil {
		return fmt.Errorf("demote response from %s is not a demote answer (%q): %w", endpoint, snippet(raw), decodeErr)
	}
	if !answer.Demoted {
		reason := answer.Error
		if reason == "" {
			reason = "no reason given"
		}
		return fmt.Errorf("%s answered but did not demote: %s", endpoint, reason)
	}
	// Demoting some other node, e.g. because the address now belongs to a
	// replacement, does not stop the old leader.
	if answer.NodeID != "" && t.NodeID != "" && answer.NodeID != t.NodeID {
		return fmt.Errorf("%s demoted node %q, want %q", endpoint, answer.NodeID, t.NodeID)
	}
	m.logger.Info("rpc demoted target", "target", t.NodeID, "epoch", t.Epoch,
		"url", endpoint, "node_id", answer.NodeID, "target_epoch_reported", answer.Epoch)
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "an unnamed node"
	}
	return s
}

// snippet keeps error messages short when a server answers with a page.
func snippet(b []byte) string {
	const n = 200
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// BearerCheck returns a function reporting whether a request carries
// "Authorization: Bearer <token>". The admin API's other mutating endpoints
// use it too, so every endpoint checks the token the same way.
func BearerCheck(token string) func(*http.Request) bool {
	// Comparing digests keeps the comparison constant-time even in the
	// token's length.
	want := sha256.Sum256([]byte(token))
	return func(r *http.Request) bool {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		gotSum := sha256.Sum256([]byte(got))
		match := subtle.ConstantTimeCompare(gotSum[:], want[:]) == 1
		return ok && match
	}
}

// DemoteHandler serves POST /v1/demote for d. Requests must carry
// "Authorization: Bearer <token>"; an empty token disables the endpoint, so a
// node without a configured token cannot be demoted remotely.
func DemoteHandler(d Demoter, token string) http.Handler {
	authorized := BearerCheck(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token == "" {
			writeDemoteResponse(w, http.StatusForbidden, DemoteResponse{Error: "mutating endpoints disabled"})
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeDemoteResponse(w, http.StatusMethodNotAllowed, DemoteResponse{Error: "method must be POST"})
			return
		}
		if !authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="failoverd"`)
			writeDemoteResponse(w, http.StatusUnauthorized, DemoteResponse{Error: "missing or wrong bearer token"})
			return
		}

		var req DemoteRequest
		raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxDemoteBody))
		if err != nil {
			writeDemoteResponse(w, http.StatusRequestEntityTooLarge, DemoteResponse{Error: "request body too large"})
			return
		}
		// An empty body is allowed, so an operator can demote with a bare POST.
		if len(bytes.TrimSpace(raw)) > 0 {
			if err := json.Unmarshal(raw, &req); err != nil {
				writeDemoteResponse(w, http.StatusBadRequest, DemoteResponse{Error: "invalid request body: " + err.Error()})
				return
			}
		}

		answer, err := d.Demote(r.Context(), demoteReason(req))
		if err != nil {
			answer.Demoted = false
			answer.Error = err.Error()
			writeDemoteResponse(w, http.StatusInternalServerError, answer)
			return
		}
		writeDemoteResponse(w, http.StatusOK, answer)
	})
}

func demoteReason(req DemoteRequest) string {
	reason := req.Reason
	if reason == "" {
		reason = "demote requested over rpc"
	}
	if req.From != "" || req.Epoch != 0 {
		reason = fmt.Sprintf("%s (from %q, epoch %d)", reason, req.From, req.Epoch)
	}
	return reason
}

func writeDemoteResponse(w http.ResponseWriter, status int, resp DemoteResponse) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp)
}
