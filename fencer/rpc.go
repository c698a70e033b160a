package fencer

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/internal/loopback"
)

// DefaultRPCTimeout bounds one demote request when RPCConfig.Timeout is 0.
const DefaultRPCTimeout = 5 * time.Second

// ErrInsecureHTTP is returned, before anything is sent, when the admin URL
// is plain http to a host that is not loopback and RPCConfig.AllowInsecureHTTP
// is not set: the token would cross the network in clear text.
var ErrInsecureHTTP = errors.New("refusing to send the admin token over plain http to a host that is not loopback " +
	"(use an https admin URL, or set allow_insecure_http on the rpc method)")

// ErrRedirect is returned when the admin API answers with a redirect: the
// fencer never follows one, so the token goes only to the URL it was meant for.
var ErrRedirect = errors.New("refusing to follow a redirect with the admin token")

// RPCConfig configures the rpc fencing method.
type RPCConfig struct {
	// URL, when set, is the admin API base URL to call instead of the
	// target's (Target.AdminURL, from the breadcrumb).
	URL string
	// Token is the bearer token the target's admin API expects. Required;
	// the caller reads it from a file so it never sits in the config.
	Token string
	// Timeout bounds one request, including reading the answer. 0:
	// DefaultRPCTimeout.
	Timeout time.Duration
	// From is our own node id, sent so the target can log who demoted it.
	From string
	// CAFile, when set, is a PEM file of the CA certificates that verify an
	// https admin API, instead of the system roots.
	CAFile string
	// AllowInsecureHTTP lets the token go over plain http to a host that is
	// not loopback. Dangerous: anyone on the path can read the token and
	// then demote or cede any node. Without it such URLs fail with
	// ErrInsecureHTTP before anything is dialled.
	AllowInsecureHTTP bool
	// HTTPClient sends the request, for tests; it may not be combined with
	// CAFile. Default: a client that connects directly (no proxy from the
	// environment) and verifies https servers against CAFile or the system
	// roots. Redirects are refused (ErrRedirect) whichever client is used.
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

// NewRPC validates cfg and applies defaults.
func NewRPC(cfg RPCConfig, deps Deps) (*RPC, error) {
	logger := deps.logger()
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
		if _, err := demoteURL(cfg.URL, cfg.AllowInsecureHTTP); err != nil {
			errs = append(errs, err)
		}
	}
	if cfg.CAFile != "" && cfg.HTTPClient != nil {
		errs = append(errs, errors.New("set CAFile or HTTPClient, not both"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var client http.Client
	if cfg.HTTPClient != nil {
		client = *cfg.HTTPClient
	} else {
		tr, err := NewTransport(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		client.Transport = tr
	}
	// Not following is not enough: a redirect must fail the fence, and Go
	// would resend Authorization on a redirect to the same host, http or not.
	client.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		return fmt.Errorf("%w (to %s)", ErrRedirect, req.URL.Redacted())
	}
	if cfg.AllowInsecureHTTP {
		logger.Warn("rpc fencing may send the admin token over plain http to hosts that are not loopback (allow_insecure_http)")
	}
	return &RPC{cfg: cfg, client: &client, logger: logger.With("method", "rpc")}, nil
}

// NewTransport returns the transport of the default client: direct
// connections only, since a proxy from the environment would see the token
// of an http request, TLS 1.2 or later, and CAs from caFile if set.
func NewTransport(caFile string) (*http.Transport, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := LoadCAFile(caFile)
		if err != nil {
			return nil, err
		}
		tlsCfg.RootCAs = pool
	}
	return &http.Transport{
		Proxy:             nil,
		DialContext:       (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:   tlsCfg,
		ForceAttemptHTTP2: true,
		// Fencing is rare, and an idle connection to an old leader is of no
		// use for the next one.
		DisableKeepAlives: true,
	}, nil
}

// LoadCAFile reads a PEM bundle of CA certificates into a pool. A file that
// holds no certificate is an error, so that a wrong file is not silently
// the same as an empty trust store.
func LoadCAFile(name string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", name)
	}
	return pool, nil
}

// demoteURL turns an admin API base URL into its demote endpoint. Unless
// insecureOK, a plain http URL to a host that is not loopback is refused
// with ErrInsecureHTTP.
func demoteURL(base string, insecureOK bool) (string, error) {
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
	if u.User != nil {
		// Credentials in the URL would go along with the token.
		return "", fmt.Errorf("admin url %s must not carry user information", u.Redacted())
	}
	if !insecureOK && loopback.PlainHTTPToRemote(u) {
		return "", fmt.Errorf("admin url %s: %w", base, ErrInsecureHTTP)
	}
	return strings.TrimRight(u.String(), "/") + adminapi.DemotePath, nil
}

// Name implements Method.
func (m *RPC) Name() string { return "rpc" }

// StepTimeout is the time to give this method in a Chain: its own timeout
// (RPCConfig.Timeout or its default), which already bounds the whole
// request.
func (m *RPC) StepTimeout() time.Duration { return m.cfg.Timeout }

// StepTimeout is the StepTimeout of an RPC built from c: c.Timeout, or
// DefaultRPCTimeout when it is 0.
func (c RPCConfig) StepTimeout() time.Duration {
	if c.Timeout == 0 {
		return DefaultRPCTimeout
	}
	return c.Timeout
}

// Fence implements Method. It returns nil only when the target's admin API
// answers 2xx with "demoted": true, naming the target's node and an epoch
// at least the target's:
//
//   - node_id must equal Target.NodeID. An answer without one proves
//     nothing, and one from another node (whose address the breadcrumb now
//     points to, or our own node when the old leader advertised a loopback
//     URL) demoted the wrong service.
//   - epoch must be >= Target.Epoch. A daemon reports the epoch of its
//     current or last term, and epochs only grow, so a lower one comes from
//     a daemon that has led neither the fenced term nor a later one: one
//     restarted since, or a replacement that took over the address or the
//     node id. We cannot tell those apart, and only the first has stopped
//     the service that led the term, so it counts as failure and the next
//     method (ssh, shell) runs. A later epoch is accepted: that daemon has
//     led a term of this node id since the fenced one began, so it is the
//     node's current daemon (node ids are unique in a cluster), the fenced
//     term is over for it, and "demoted" covers its service whatever term
//     it is in.
//
// The token is sent only over https or to a loopback host, unless
// RPCConfig.AllowInsecureHTTP; otherwise Fence fails with ErrInsecureHTTP
// before dialling.
func (m *RPC) Fence(ctx context.Context, t Target) error {
	if t.NodeID == "" {
		// Nothing in the answer could be checked against it.
		return errors.New("target has no node id: cannot check who answers the demote request")
	}
	base := m.cfg.URL
	if base == "" {
		base = t.AdminURL
	}
	if base == "" {
		return fmt.Errorf("target %q has no admin url and none is configured", t.NodeID)
	}
	endpoint, err := demoteURL(base, m.cfg.AllowInsecureHTTP)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeoutCause(ctx, m.cfg.Timeout,
		fmt.Errorf("no answer within rpc timeout %s: %w", m.cfg.Timeout, context.DeadlineExceeded))
	defer cancel()
	body, err := json.Marshal(adminapi.DemoteRequest{
		Reason: fmt.Sprintf("fenced by %s: leadership of epoch %d is over", orUnknown(m.cfg.From), t.Epoch),
		Epoch:  t.Epoch,
		From:   m.cfg.From,
		Target: t.NodeID,
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
	raw, err := io.ReadAll(io.LimitReader(resp.Body, adminapi.MaxDemoteBody))
	if err != nil {
		return fmt.Errorf("reading demote response from %s: %w", endpoint, ctxCauseOr(ctx, err))
	}
	var answer adminapi.DemoteResponse
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
	if err := checkAnswer(t, answer); err != nil {
		return fmt.Errorf("%s: %w", endpoint, err)
	}
	m.logger.Info("rpc demoted target", "target", t.NodeID, "epoch", t.Epoch,
		"url", endpoint, "node_id", answer.NodeID, "target_epoch_reported", answer.Epoch)
	return nil
}

// checkAnswer applies Fence's rule to a 2xx answer.
func checkAnswer(t Target, a adminapi.DemoteResponse) error {
	switch {
	case !a.Demoted:
		reason := a.Error
		if reason == "" {
			reason = "no reason given"
		}
		return fmt.Errorf("answered but did not demote: %s", reason)
	case a.NodeID == "":
		return fmt.Errorf("answer names no node, so it does not show that %q was demoted", t.NodeID)
	case a.NodeID != t.NodeID:
		return fmt.Errorf("demoted node %q, want %q", a.NodeID, t.NodeID)
	case a.Epoch < t.Epoch:
		return fmt.Errorf("node %q answered with epoch %d, before the fenced epoch %d: "+
			"that daemon did not lead the term being fenced (restarted, or another host with the same node id)",
			a.NodeID, a.Epoch, t.Epoch)
	}
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
