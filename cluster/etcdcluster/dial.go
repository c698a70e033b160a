package etcdcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// DialConfig says how to reach an etcd cluster.
type DialConfig struct {
	Endpoints []string // host:port or URLs of the etcd members' client ports
	// DialTimeout bounds the first connection (0: 5s).
	DialTimeout time.Duration
	// TLS is the client's TLS setup (nil: plain TCP).
	TLS *tls.Config
	// Username and Password authenticate the client (empty: none).
	Username, Password string
}

// Dial returns a client of the etcd cluster without waiting for it. The
// client's gRPC keepalive pings an idle connection, so that a dead member
// is noticed without a request; the client's own logging is silenced (the
// Store logs what matters).
//
// A user's requests are authenticated by userAuth rather than by etcd's
// client, which authenticates inside clientv3.New and so fails when etcd
// is out of reach: a daemon started while etcd is down could not start.
// userAuth authenticates at the first request instead, and again when
// etcd says the token is no longer valid. A wrong password is then the
// answer to the requests, not an error of Dial; Check tells it apart
// from an unreachable etcd.
func Dial(cfg DialConfig) (*clientv3.Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcdcluster: no endpoints")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	cc := clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		TLS:                  cfg.TLS,
		Logger:               zap.NewNop(),
	}
	var ua *userAuth
	if cfg.Username != "" {
		ua = &userAuth{user: cfg.Username, password: cfg.Password}
		cc.DialOptions = []grpc.DialOption{grpc.WithPerRPCCredentials(ua),
			grpc.WithChainUnaryInterceptor(ua.unary), grpc.WithChainStreamInterceptor(ua.stream)}
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, err
	}
	if ua != nil {
		ua.auth = clientv3.NewAuth(cli)
	}
	return cli, nil
}

// authenticateMethod is etcd's Authenticate RPC, which carries no token.
const authenticateMethod = "/etcdserverpb.Auth/Authenticate"

// userAuth gives every request of a client the token of a user, asking
// etcd for one (Authenticate) when it has none; a request that etcd
// answers "invalid auth token" (an expired token, or auth changed) drops
// it, and etcd's client sends that request again, with a new one. One
// Authenticate runs at a time, on its own deadline rather than the
// request's: etcd hashes the password (bcrypt), and on a loaded etcd that
// may outlast a short request (a lease renewal), which must not restart it.
type userAuth struct {
	user, password string
	auth           clientv3.Auth // set once the client exists, before any request

	mu      sync.Mutex
	token   string
	err     error         // the last Authenticate's error
	pending chan struct{} // closed when the running Authenticate returns (nil: none)
}

// authTimeout bounds one Authenticate.
const authTimeout = 30 * time.Second

// GetRequestMetadata is the token of the user (credentials.PerRPCCredentials).
func (a *userAuth) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	if ri, ok := credentials.RequestInfoFromContext(ctx); ok && ri.Method == authenticateMethod {
		return nil, nil
	}
	a.mu.Lock()
	if a.token != "" {
		tok := a.token
		a.mu.Unlock()
		return map[string]string{rpctypes.TokenFieldNameGRPC: tok}, nil
	}
	if a.pending == nil {
		a.pending = make(chan struct{})
		go a.authenticate(a.pending)
	}
	p := a.pending
	a.mu.Unlock()
	select {
	case <-p:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.token == "" {
		return nil, a.err
	}
	return map[string]string{rpctypes.TokenFieldNameGRPC: a.token}, nil
}

// authenticate asks etcd for a token and closes done.
func (a *userAuth) authenticate(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), authTimeout)
	defer cancel()
	resp, err := a.auth.Authenticate(ctx, a.user, a.password)
	a.mu.Lock()
	if err != nil {
		a.err = fmt.Errorf("authenticating to etcd as %q: %w", a.user, err)
	} else {
		a.token, a.err = resp.Token, nil
	}
	a.pending = nil
	a.mu.Unlock()
	close(done)
}

// RequireTransportSecurity is false: etcd serves users over plain TCP too.
func (a *userAuth) RequireTransportSecurity() bool { return false }

// saw drops the token when err says etcd no longer takes it.
func (a *userAuth) saw(err error) {
	if err == nil {
		return
	}
	if e := rpctypes.Error(err); errors.Is(e, rpctypes.ErrInvalidAuthToken) || errors.Is(e, rpctypes.ErrAuthOldRevision) {
		a.mu.Lock()
		a.token = ""
		a.mu.Unlock()
	}
}

func (a *userAuth) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	a.saw(err)
	return err
}

func (a *userAuth) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		a.saw(err)
		return nil, err
	}
	return &authStream{ClientStream: s, a: a}, nil
}

// authStream watches a stream's answers for an invalid token.
type authStream struct {
	grpc.ClientStream
	a *userAuth
}

func (s *authStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.a.saw(err)
	}
	return err
}

// Setup errors Check reports: retrying does not help, the configuration
// must change.
var (
	// ErrUntrustedServer: an etcd member's TLS certificate does not verify
	// against the configured CA (or names another host).
	ErrUntrustedServer = errors.New("etcdcluster: etcd's TLS certificate is not trusted")
	// ErrAuthFailed: etcd refused the user and password.
	ErrAuthFailed = errors.New("etcdcluster: etcd refused the user and password")
)

// Check tells why cli, made by Dial from cfg, has no session yet when the
// reason is the setup rather than the network: a member's certificate
// that the CA does not verify (ErrUntrustedServer; checked by a TLS
// handshake of its own with each endpoint) or a password etcd refuses
// (ErrAuthFailed). nil means neither was found: etcd may just be out of
// reach. Each probe takes a few seconds at most.
func Check(ctx context.Context, cli *clientv3.Client, cfg DialConfig) error {
	if cfg.TLS != nil {
		for _, ep := range cfg.Endpoints {
			if err := checkTLS(ctx, ep, cfg.TLS); err != nil {
				return err
			}
		}
	}
	if cfg.Username == "" || cfg.Password == "" {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := cli.Auth.Authenticate(actx, cfg.Username, cfg.Password)
	if errors.Is(err, rpctypes.ErrAuthFailed) {
		return fmt.Errorf("%w: user %q: %v", ErrAuthFailed, cfg.Username, err)
	}
	return nil
}

// checkTLS shakes hands with endpoint ep and reports a certificate that
// does not verify; any other failure (nothing listens, a timeout) is not
// its business.
func checkTLS(ctx context.Context, ep string, tc *tls.Config) error {
	host := ep
	if u, err := url.Parse(ep); err == nil && u.Host != "" {
		host = u.Host
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: tc.Clone()}
	if d.Config.ServerName == "" {
		d.Config.ServerName, _, _ = net.SplitHostPort(host)
	}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err == nil {
		conn.Close()
		return nil
	}
	var verr *tls.CertificateVerificationError
	if errors.As(err, &verr) {
		return fmt.Errorf("%w: %s: %v", ErrUntrustedServer, ep, verr)
	}
	return nil
}

// PreVoteWarning is the warning due for an etcd member whose server
// reports version v ("" when none is due). etcd before 3.5 (Debian's
// etcd-server is 3.4) runs without pre-vote unless started with
// --pre-vote: a member that was cut off from its peers campaigns in ever
// higher terms, and when it rejoins it forces an etcd election, during
// which no lease is renewed, so the failoverd leader may lose its term
// (a second failover after the cut healed). The server does not say
// whether the flag is set, so the warning names it.
func PreVoteWarning(v string) string {
	major, minor, ok := serverVersion(v)
	if !ok || major > 3 || major == 3 && minor >= 5 {
		return ""
	}
	return fmt.Sprintf("etcd %s runs without pre-vote unless started with --pre-vote: a member that rejoins after being cut off "+
		"forces an etcd election, and the failoverd leader may lose its term then (a second failover); "+
		"start every etcd member with --pre-vote=true (or upgrade etcd to 3.5 or later, where it is the default)", v)
}

// serverVersion parses the major and minor of an etcd version ("3.4.23").
func serverVersion(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// warnVersions asks each of the client's endpoints for its server's
// version and logs PreVoteWarning for every one it applies to; an
// endpoint that does not answer within a few seconds is left out.
func (c *Conn) warnVersions() {
	for _, ep := range c.cli.Endpoints() {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		st, err := c.cli.Status(ctx, ep)
		cancel()
		if err != nil {
			c.log.Debug("asking an etcd member for its version failed", "endpoint", ep, "err", err)
			continue
		}
		if w := PreVoteWarning(st.Version); w != "" {
			c.log.Warn(w, "endpoint", ep, "etcd_version", st.Version)
		}
	}
}
