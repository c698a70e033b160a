package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/failoverd/failoverd/internal/secret"
)

// ShutdownTimeout bounds the graceful shutdown at the end of Server.Run;
// connections still open after it are closed.
const ShutdownTimeout = 5 * time.Second

// Config is the admin API's own settings.
type Config struct {
	// Listen is the host:port to serve on; port 0 picks a free one (see
	// Server.Addr). Required.
	Listen string
	// Token is the bearer token the mutating endpoints require; empty
	// disables them (403 to everyone).
	Token secret.Secret
	// TLS, when set, serves HTTPS only (see TLSConfig).
	TLS *tls.Config
}

// Deps are the admin API's collaborators.
type Deps struct {
	// Node is the daemon the API reports on and acts on. Required.
	Node Node
	// Leaders answers GET /v1/leader; nil answers 503 there.
	Leaders LeaderSource
	// History answers GET /v1/history; nil: not served (404).
	History HistorySource
	// Pauser serves POST /v1/pause and /v1/resume; nil answers 503 there.
	Pauser Pauser
	// Reloader serves POST /v1/reload; nil answers 503 there.
	Reloader Reloader
	// Gatherer is served on /metrics; nil serves an empty registry.
	Gatherer prometheus.Gatherer
	// Logger receives the mutating calls, "admin api listening" and the
	// net/http errors it would otherwise print to stderr; nil discards.
	Logger *slog.Logger
}

// Server serves the admin API on a TCP address until its Run context ends.
type Server struct {
	listen string
	srv    *http.Server
	logger *slog.Logger
	tls    *tls.Config
	api    *api // nil: a handler of NewServerFor
	// cert is served to new TLS connections (SetCertificate).
	cert atomic.Pointer[tls.Certificate]

	mu sync.Mutex
	ln net.Listener
}

// New returns the admin API server for deps.Node. It does not bind; Listen
// or Run does.
func New(cfg Config, deps Deps) (*Server, error) {
	if cfg.Listen == "" {
		return nil, errors.New("admin api: no listen address")
	}
	if deps.Node == nil {
		return nil, errors.New("admin api: no node")
	}
	if deps.Gatherer == nil {
		deps.Gatherer = prometheus.NewRegistry()
	}
	logger := deps.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "admin")
	a := &api{node: deps.Node, leaders: deps.Leaders, pauser: deps.Pauser, reloader: deps.Reloader, logger: logger}
	a.setToken(cfg.Token.Reveal())
	h := newHandler(a, deps.Gatherer)
	if deps.History != nil {
		h = withHistory(h, deps.History)
	}
	s := newServer(cfg.Listen, h, cfg.TLS, logger)
	s.api = a
	return s, nil
}

// SetToken replaces the bearer token of the mutating endpoints for the
// requests that follow ("": disables them).
func (s *Server) SetToken(token secret.Secret) {
	if s.api != nil {
		s.api.setToken(token.Reveal())
	}
}

// SetCertificate serves cert to the TLS connections that follow; the open
// ones keep theirs. It fails when the API does not serve TLS.
func (s *Server) SetCertificate(cert tls.Certificate) error {
	if s.tls == nil {
		return errors.New("admin api: not serving TLS")
	}
	s.cert.Store(&cert)
	return nil
}

// TLSConfig returns the admin API's server settings for cert: TLS 1.2 or
// later, with Go's default cipher suites (for TLS 1.2 only ECDHE key exchange
// with AEAD ciphers) and curves. Peers are failoverd and operators' tools,
// all recent, so nothing older needs to be accepted.
func TLSConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
	}
}

// newServer returns a Server for h on listen; logger already names the
// component.
func newServer(listen string, h http.Handler, tlsCfg *tls.Config, logger *slog.Logger) *Server {
	s := &Server{listen: listen, logger: logger}
	if tlsCfg != nil {
		// The certificate is looked up per handshake, so that
		// SetCertificate reaches new connections.
		s.tls = tlsCfg.Clone()
		if len(s.tls.Certificates) > 0 {
			s.cert.Store(&s.tls.Certificates[0])
			s.tls.Certificates = nil
		}
		if s.tls.GetCertificate == nil {
			s.tls.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				if c := s.cert.Load(); c != nil {
					return c, nil
				}
				return nil, errors.New("admin api: no certificate")
			}
		}
	}
	s.srv = &http.Server{
		Handler: h,
		// Bounds slow clients. There is no WriteTimeout: demote and cede
		// wait for the demote hook, whose timeout the config sets.
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		TLSConfig:         s.tls,
	}
	return s
}

// Handler is the API itself, for serving it in tests (httptest) without
// listening.
func (s *Server) Handler() http.Handler { return s.srv.Handler }

// Listen binds the address now, so that a port in use is reported before
// the daemon joins an election it could not be fenced in. Run calls it when
// it has not been called. Calling it again is a no-op.
func (s *Server) Listen() error {
	_, err := s.listener()
	return err
}

func (s *Server) listener() (net.Listener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return s.ln, nil
	}
	ln, err := net.Listen("tcp", s.listen)
	if err != nil {
		return nil, fmt.Errorf("admin api: %w", err) // *net.OpError names the address
	}
	s.ln = ln
	return ln, nil
}

// Addr is the bound address, nil before Listen.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Run serves until ctx ends, then shuts down gracefully within
// ShutdownTimeout. It returns nil after a normal stop and an error when
// binding or serving failed or connections had to be cut. Run may be called
// once; as an oklog/run actor, cancel ctx in the interrupt function.
func (s *Server) Run(ctx context.Context) error {
	ln, err := s.listener()
	if err != nil {
		return err
	}
	s.logger.Info("admin api listening", "addr", ln.Addr().String(), "tls", s.tls != nil)

	served := make(chan error, 1)
	go func() {
		if s.tls != nil {
			// The certificate is in TLSConfig, so no file names.
			served <- s.srv.ServeTLS(ln, "", "")
			return
		}
		served <- s.srv.Serve(ln)
	}()
	select {
	case err := <-served:
		// Serve returns only on accept errors before Shutdown.
		return fmt.Errorf("admin api on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	shutdownErr := s.srv.Shutdown(shutdownCtx)
	if shutdownErr != nil {
		// In-flight requests outlived the timeout; cut them so Run ends.
		shutdownErr = errors.Join(fmt.Errorf("admin api shutdown: %w", shutdownErr), s.srv.Close())
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return errors.Join(fmt.Errorf("admin api on %s: %w", ln.Addr(), err), shutdownErr)
	}
	return shutdownErr
}
