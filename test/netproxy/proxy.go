// Package netproxy holds loopback TCP proxies for tests that put faults
// between a client and a server of any protocol: a partition (Blackhole),
// a reset (Reset), latency. The harnesses of the coordination services
// (test/zktest, test/etcdtest) and the cluster harness use it; protocol-aware
// proxies stay with their protocol.
package netproxy

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a loopback TCP proxy that can cut a client off from its server:
// Blackhole stops moving bytes while keeping connections open (a partition:
// neither side hears anything), Reset closes every connection, Latency delays
// every chunk.
type Proxy struct {
	l       net.Listener
	target  func() string
	conns   ConnSet
	mu      sync.Mutex
	holes   bool
	closed  bool
	latency time.Duration
	cond    *sync.Cond
	// holdNew: during a blackhole, a new connection does not reach the
	// target until the blackhole ends (the target sees nothing, as behind a
	// partition). Without it the target is dialled at once.
	holdNew bool
	// rewrite, when set, reads the first message the connecting side sends
	// and returns what to forward instead (set before Start).
	rewrite func(io.Reader) ([]byte, error)
	// fromTarget, when set, forwards the target's side of each connection
	// instead of the plain byte copy (set before Start).
	fromTarget func(dst, src net.Conn)
}

// New listens on a free loopback port and forwards to the address that
// target returns at connect time (so it can follow a restarted server).
func New(t testing.TB, target func() string) *Proxy {
	t.Helper()
	p := Listen(t, target, false)
	p.Start()
	return p
}

// Listen listens but does not accept yet: set what it forwards
// (SetRewrite, SetFromTarget), then Start it. With holdNew, a connection
// made during a blackhole reaches the target only once it ends, and a
// target that does not listen yet is dialled again for a few seconds (a
// peer that is about to listen must not look like one that answered and
// hung up).
func Listen(t testing.TB, target func() string, holdNew bool) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{l: l, target: target, holdNew: holdNew}
	p.cond = sync.NewCond(&p.mu)
	t.Cleanup(p.Close)
	return p
}

// SetRewrite makes the proxy read the first message of each connecting
// side with f and forward what f returns instead. Before Start.
func (p *Proxy) SetRewrite(f func(io.Reader) ([]byte, error)) { p.rewrite = f }

// SetFromTarget makes f forward the target's side of each connection (src)
// to the connecting side (dst), with Forward, instead of a byte copy; f
// closes both when it returns. Before Start.
func (p *Proxy) SetFromTarget(f func(dst, src net.Conn)) { p.fromTarget = f }

// Start accepts connections.
func (p *Proxy) Start() { go p.accept() }

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Port is the port of Addr.
func (p *Proxy) Port() int { return p.l.Addr().(*net.TCPAddr).Port }

// Blackhole starts (true) or ends (false) a partition. While it lasts, new
// connections are accepted but carry nothing.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	p.holes = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

// SetLatency delays every forwarded chunk by d.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Reset closes every open connection (clients see a connection reset).
func (p *Proxy) Reset() { p.conns.CloseAll() }

// Conns is the number of open connections.
func (p *Proxy) Conns() int { return p.conns.Len() }

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.l.Close()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Blackhole(false)
	p.Reset()
}

func (p *Proxy) accept() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.serve(in)
	}
}

func (p *Proxy) serve(in net.Conn) {
	p.conns.Add(in)
	p.mu.Lock()
	for p.holdNew && p.holes && !p.closed {
		p.cond.Wait() // behind a partition the target sees nothing yet
	}
	closed, rewrite := p.closed, p.rewrite
	p.mu.Unlock()
	if closed {
		in.Close()
		return
	}
	var first []byte
	if rewrite != nil {
		var err error
		if first, err = rewrite(in); err != nil {
			in.Close()
			return
		}
	}
	out, err := p.dial()
	if err != nil {
		in.Close()
		return
	}
	p.conns.Add(out)
	if len(first) > 0 {
		if !p.Forward(out, first) {
			in.Close()
			out.Close()
			return
		}
	}
	go p.pipe(out, in)
	if p.fromTarget != nil {
		p.fromTarget(in, out)
		return
	}
	p.pipe(in, out)
}

// dial connects to the target. The connecting side already saw its connect
// succeed (the proxy accepted it), so a holdNew proxy retries for a while.
func (p *Proxy) dial() (net.Conn, error) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		out, err := net.DialTimeout("tcp", p.target(), 2*time.Second)
		if err == nil || !p.holdNew || time.Now().After(deadline) {
			return out, err
		}
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Forward writes b to dst once no blackhole holds it, after the latency;
// false when dst failed.
func (p *Proxy) Forward(dst net.Conn, b []byte) bool {
	p.mu.Lock()
	for p.holes {
		p.cond.Wait() // hold the bytes: nobody hears anything
	}
	d := p.latency
	p.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
	}
	_, err := dst.Write(b)
	return err == nil
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.Forward(dst, buf[:n]) {
			return
		}
		if err != nil {
			return
		}
	}
}
