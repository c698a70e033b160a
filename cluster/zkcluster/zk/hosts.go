package zk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// hostList is the go-zookeeper HostProvider we use instead of its DNS one,
// which resolves every name once, in Connect, and fails the whole Connect
// when any name does not resolve: one bad name in the server list then
// blocks every new session although a quorum is healthy. hostList never
// resolves anything: it hands out the configured host:port strings in turn
// and Session.dial resolves the one it is given, on every attempt, so a
// name that does not resolve costs one failed dial per round and a name
// that starts resolving again is used at the next round.
type hostList struct {
	mu      sync.Mutex
	servers []string
	cur     int // index last handed out; -1 before the first Next
	anchor  int // index a round starts from: the server last connected to; -1 none yet
}

// Init takes the server list (go-zookeeper has shuffled it). It fails only
// on an empty list.
func (h *hostList) Init(servers []string) error {
	if len(servers) == 0 {
		return errors.New("zk: no servers")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.servers = append([]string(nil), servers...)
	h.cur, h.anchor = -1, -1
	return nil
}

// Len is the number of configured servers.
func (h *hostList) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

// Next returns the next server to try. retryStart is true when a whole round
// went by since the last successful connection (or since the first try):
// go-zookeeper then pauses a second before going on, as with its own
// provider. (With a single server, that pause also comes before
// reconnecting to it; tests that expire sessions from a second connection
// rely on it.)
func (h *hostList) Next() (server string, retryStart bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cur = (h.cur + 1) % len(h.servers)
	retryStart = h.cur == h.anchor
	if h.anchor == -1 {
		h.anchor = h.cur
	}
	return h.servers[h.cur], retryStart
}

// Connected records a successful connection to the server last handed out.
func (h *hostList) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.anchor = h.cur
}

// names resolves server names at dial time and logs a name once when it
// stops resolving and once when it resolves again, not on every attempt.
type names struct {
	resolve func(ctx context.Context, host string) ([]string, error)
	log     *slog.Logger

	mu     sync.Mutex
	broken map[string]string // host -> error text of its last failed lookup
}

func newNames(resolve func(context.Context, string) ([]string, error), log *slog.Logger) *names {
	if resolve == nil {
		resolve = net.DefaultResolver.LookupHost
	}
	return &names{resolve: resolve, log: log, broken: map[string]string{}}
}

// lookup returns the addresses of host (an IP literal is returned as is).
// It gives up after lookupTimeout even if the resolver does not.
func (n *names) lookup(host string) ([]string, error) {
	if net.ParseIP(host) != nil {
		return []string{host}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	type result struct {
		addrs []string
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		addrs, err := n.resolve(ctx, host)
		ch <- result{addrs, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		r.err = ctx.Err()
	}
	if r.err == nil && len(r.addrs) == 0 {
		r.err = errors.New("no addresses")
	}
	n.note(host, r.err)
	if r.err != nil {
		return nil, fmt.Errorf("zk: resolving %s: %w", host, r.err)
	}
	return r.addrs, nil
}

// note logs changes of a name's state.
func (n *names) note(host string, err error) {
	n.mu.Lock()
	prev, wasBroken := n.broken[host]
	switch {
	case err != nil:
		n.broken[host] = err.Error()
	case wasBroken:
		delete(n.broken, host)
	}
	n.mu.Unlock()
	switch {
	case err != nil && (!wasBroken || prev != err.Error()):
		n.log.Warn("zookeeper server name does not resolve; trying the other servers", "host", host, "err", err)
	case err == nil && wasBroken:
		n.log.Info("zookeeper server name resolves again", "host", host)
	}
}

// dial resolves addr's host and connects to its addresses in turn. It
// refuses once the session is dead, so that go-zookeeper cannot open a
// successor session behind our back and run queued requests on it.
func (s *Session) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	if s.dead() {
		return nil, ErrSessionExpired
	}
	s.conns.Add(1) // before any request can go over the new connection
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("zk: server %q: %w", addr, err)
	}
	ips, err := s.client.names.lookup(host)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(s.life, timeout)
	defer cancel()
	dial := s.client.dial
	var errs []error
	for _, ip := range ips {
		c, err := dial(ctx, network, net.JoinHostPort(ip, port))
		if err == nil && s.client.cfg.TLS != nil {
			c, err = s.client.handshake(ctx, c, host, addr)
		}
		if err == nil {
			return &sniffConn{Conn: c, s: s}, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// handshake runs the TLS handshake with server addr (host as configured)
// over c, verifying the server's certificate against host. A failure is
// logged as an error, once per distinct message and then at most every
// tlsLogEvery: go-zookeeper logs failed connections only at debug level,
// and a wrong CA or certificate must not look like a server that is down.
func (c *Client) handshake(ctx context.Context, conn net.Conn, host, addr string) (net.Conn, error) {
	tc := c.cfg.TLS.Clone()
	if tc.ServerName == "" {
		tc.ServerName = host
	}
	t := tls.Client(conn, tc)
	err := t.HandshakeContext(ctx)
	if err == nil {
		return t, nil
	}
	conn.Close()
	err = fmt.Errorf("zk: TLS handshake with %s: %w", addr, err)
	c.tlsLog.Lock()
	if msg := err.Error(); msg != c.tlsLog.last || time.Since(c.tlsLog.at) >= tlsLogEvery {
		c.tlsLog.last, c.tlsLog.at = msg, time.Now()
		c.log.Error("TLS handshake with a ZooKeeper server failed; check zookeeper.tls and the server's certificate", "server", addr, "err", err)
	}
	c.tlsLog.Unlock()
	return nil, err
}

// tlsLogEvery is the least time between two logs of the same TLS failure.
const tlsLogEvery = time.Minute
