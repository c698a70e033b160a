package zk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	gozk "github.com/go-zookeeper/zk"
)

// Config describes how to reach the ensemble (settings; the parts a
// Client uses are its Deps).
type Config struct {
	Servers        []string      // host:port of every server
	SessionTimeout time.Duration // requested; the server may negotiate it
	Auth           *Auth         // nil: open ACLs
	// Protect lists znode paths that nobody but us may change: with Auth,
	// before a new session is handed out, CheckACLs runs on each (fixing
	// the znodes we own, failing the session on the others). Ignored
	// without Auth.
	Protect []string
	// TLS, when set, runs every connection over TLS with this
	// configuration (ServerName defaults to the configured host of the
	// server dialed).
	TLS *tls.Config
}

// Deps are the parts a Client uses; a zero field means the default.
type Deps struct {
	Logger *slog.Logger // nil: discard
	// Dial, when set, replaces the TCP dialer (tests put fault proxies here).
	// It gets resolved addresses (ip:port).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Resolve, when set, replaces the DNS lookup of server names (tests
	// inject failing or hanging resolvers here). Names are resolved at dial
	// time, again on every attempt; IP literals are never looked up.
	Resolve func(ctx context.Context, host string) ([]string, error)
}

// lookupTimeout bounds one name lookup at dial time, so that a resolver
// that hangs delays a connection attempt but never blocks it for good.
const lookupTimeout = 2 * time.Second

// setupRetry is the least time between a session that failed its setup
// (authentication or ACL check) and the next one, so that a permanent
// failure does not make the client churn sessions on the ensemble.
const setupRetry = time.Second

// Client hands out sessions on one ensemble, one at a time.
//
// A session is handed out only once it is ready: established,
// authenticated and, with Config.Protect, checked. Nothing here does network I/O under a
// lock, and Current takes no lock at all: the admin endpoints (status,
// leader, metrics) call it and must never wait on the network.
type Client struct {
	cfg   Config
	dial  func(ctx context.Context, network, addr string) (net.Conn, error) // Deps.Dial, or a TCP dialer
	log   *slog.Logger
	acl   []gozk.ACL
	ident ACL // our digest identity (with Auth)
	names *names

	cur atomic.Pointer[Session] // newest ready session

	mu      sync.Mutex // guards opening and closed; never held across I/O
	opening *Session   // the session being made ready, if any
	closed  bool

	watchEvents atomic.Int64

	tlsLog struct { // the last TLS failure logged (handshake)
		sync.Mutex
		last string
		at   time.Time
	}
}

// NewClient checks cfg; it does not connect yet.
func NewClient(cfg Config, deps Deps) (*Client, error) {
	if len(cfg.Servers) == 0 {
		return nil, errors.New("zk: no servers configured")
	}
	if cfg.SessionTimeout <= 0 {
		return nil, errors.New("zk: session timeout must be > 0")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Dial == nil {
		deps.Dial = (&net.Dialer{}).DialContext
	}
	c := &Client{cfg: cfg, dial: deps.Dial, log: deps.Logger.With("component", "zk")}
	c.names = newNames(deps.Resolve, c.log)
	if cfg.Auth != nil {
		c.acl = append(gozk.DigestACL(gozk.PermAll, cfg.Auth.User, cfg.Auth.Password), gozk.WorldACL(gozk.PermRead)...)
		c.ident = ACL{Scheme: c.acl[0].Scheme, ID: c.acl[0].ID}
	} else {
		c.acl = gozk.WorldACL(gozk.PermAll)
	}
	return c, nil
}

// WatchEvents counts the watch notifications delivered to this client so far
// (every session). The election benchmark and herd tests read it.
func (c *Client) WatchEvents() int64 { return c.watchEvents.Load() }

// Current returns the live, ready session, or nil when there is none. It
// never blocks.
func (c *Client) Current() *Session {
	if s := c.cur.Load(); s != nil && !s.dead() {
		return s
	}
	return nil
}

// Session returns the live session, opening a new one when the previous
// expired. It waits until the new session is ready: established,
// authenticated and checked. A session whose setup failed for good (the
// server refused our credentials, a protected path has an ACL we may not
// fix) is closed and its error
// returned; the next call opens a new session.
func (c *Client) Session(ctx context.Context) (*Session, error) {
	for {
		if s := c.Current(); s != nil {
			return s, nil
		}
		s, wait, err := c.pending()
		if err != nil {
			return nil, err
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		select {
		case <-s.ready:
			if err := c.publish(s); err != nil {
				return nil, err
			}
			return s, nil
		case <-s.done:
			return nil, s.failure()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// pending returns the session being made ready, starting a new one when
// there is none. When the last one failed its setup moments ago, it says
// how long to wait first instead.
func (c *Client) pending() (*Session, time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, 0, ErrClosed
	}
	if s := c.opening; s != nil {
		if !s.dead() {
			return s, 0, nil
		}
		if at := s.failedAt(); !at.IsZero() {
			if wait := setupRetry - time.Since(at); wait > 0 {
				return nil, wait, nil
			}
		}
	}
	s, err := c.open()
	if err != nil {
		return nil, 0, err
	}
	c.opening = s
	return s, 0, nil
}

// publish makes a ready session the current one.
func (c *Client) publish(s *Session) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if c.opening == s {
		c.opening = nil
	}
	// Only one session is opened at a time, and only when the current one
	// is over: s is the newest.
	c.cur.Store(s)
	return nil
}

// Close closes the current session (deleting its ephemeral znodes) and
// refuses new ones.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	cur, opening := c.cur.Load(), c.opening
	c.opening = nil
	c.mu.Unlock()
	if cur != nil {
		cur.Close()
	}
	if opening != nil && opening != cur {
		opening.Close()
	}
}

// open creates a session and starts connecting it in the background. It
// does no network I/O: our host list resolves names only at dial time, on
// go-zookeeper's connection goroutine.
func (c *Client) open() (*Session, error) {
	life, cancel := context.WithCancel(context.Background())
	s := &Session{
		client:      c,
		log:         c.log,
		established: make(chan struct{}),
		ready:       make(chan struct{}),
		done:        make(chan struct{}),
		changed:     make(chan struct{}),
		life:        life,
		cancel:      cancel,
	}
	// Hold mu until conn is set: the event callback reads it.
	s.mu.Lock()
	conn, _, err := gozk.Connect(c.cfg.Servers, c.cfg.SessionTimeout,
		gozk.WithHostProvider(&hostList{}),
		gozk.WithDialer(s.dial),
		gozk.WithEventCallback(s.onEvent),
		gozk.WithLogger(zkLogger{c.log}),
		gozk.WithLogInfo(false),
	)
	if err != nil {
		s.mu.Unlock()
		cancel()
		return nil, fmt.Errorf("zk: connecting: %w", err)
	}
	s.conn = conn
	s.mu.Unlock()
	go s.setup()
	return s, nil
}

// setup makes a new session ready once the server established it:
// authentication, then the ACL check of Config.Protect. A connection loss on the way is
// retried within the session; any other failure is permanent for this
// session, which is then closed so that nobody ever uses it.
func (s *Session) setup() {
	select {
	case <-s.established:
	case <-s.done:
		return
	}
	err := s.authenticate(s.life)
	if err == nil && s.client.cfg.Auth != nil {
		err = s.protect(s.life, s.client.cfg.Protect)
	}
	if err == nil {
		close(s.ready)
		return
	}
	if s.dead() {
		return // expired or closed meanwhile; Err says which
	}
	s.log.Error("zookeeper session unusable; closing it", "session_id", fmt.Sprintf("0x%x", s.ID()), "err", err)
	s.mu.Lock()
	s.setupErr, s.setupAt = err, time.Now()
	s.mu.Unlock()
	s.Close()
}

// failure says why a session that was never ready is over.
func (s *Session) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.setupErr != nil {
		return s.setupErr
	}
	return s.err
}

// failedAt is when the session's setup failed, or the zero time.
func (s *Session) failedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setupAt
}

// authenticate adds the digest credentials to the session; go-zookeeper
// remembers them once they were accepted and resends them after every
// reconnect, before any other request. A connection lost while the request
// is in flight says nothing about the credentials (and go-zookeeper then
// does not remember them): wait for the session to reconnect and send them
// again.
func (s *Session) authenticate(ctx context.Context) error {
	a := s.client.cfg.Auth
	if a == nil {
		return nil
	}
	for {
		err := s.do(ctx, false, func() error {
			return s.conn.AddAuth("digest", []byte(a.User+":"+a.Password))
		})
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrConnectionLoss) || s.dead() || ctx.Err() != nil {
			return fmt.Errorf("zk: authenticating as %q: %w", a.User, err)
		}
		s.log.Info("zookeeper connection lost while authenticating; retrying", "err", err)
		if err := s.waitConnected(ctx); err != nil {
			return fmt.Errorf("zk: authenticating as %q: %w", a.User, err)
		}
	}
}

// waitConnected waits until the session is connected (or over).
func (s *Session) waitConnected(ctx context.Context) error {
	for {
		st, changed := s.State()
		switch st {
		case StateConnected:
			return nil
		case StateExpired, StateClosed:
			return s.Err()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
