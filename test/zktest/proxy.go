package zktest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a loopback TCP proxy that can cut a client off from ZooKeeper:
// Blackhole stops moving bytes while keeping connections open (a partition:
// neither side hears anything), Reset closes every connection, Latency delays
// every chunk.
type Proxy struct {
	l       net.Listener
	target  func() string
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	holes   bool
	latency time.Duration
	cond    *sync.Cond
}

// NewProxy listens on a free loopback port and forwards to the address that
// target returns at connect time (so it can follow a restarted server).
func NewProxy(t testing.TB, target func() string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

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
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.l.Close()
	p.Blackhole(false)
	p.Reset()
}

func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
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
	p.track(in)
	out, err := net.DialTimeout("tcp", p.target(), 2*time.Second)
	if err != nil {
		in.Close()
		return
	}
	p.track(out)
	go p.pipe(out, in)
	p.pipe(in, out)
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.holes {
				p.cond.Wait() // hold the bytes: nobody hears anything
			}
			d := p.latency
			p.mu.Unlock()
			if d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}
