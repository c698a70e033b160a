package etcdtest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// DelayProxy is a loopback TCP proxy that delays each direction by a fixed
// time without limiting throughput (every chunk is delivered its delay
// after it arrived, chunks in flight overlap), and can hold everything
// (Blackhole) as a partition does. Unlike netproxy.Proxy's latency, which
// delays chunks one after the other, a request of several chunks takes
// the delay once.
type DelayProxy struct {
	l      net.Listener
	target string

	mu     sync.Mutex
	cond   *sync.Cond
	up     time.Duration // client to target
	down   time.Duration // target to client
	holes  bool
	closed bool
	conns  map[net.Conn]struct{}
}

// NewDelayProxy listens on a free loopback port and forwards to target;
// it is closed when the test ends.
func NewDelayProxy(t testing.TB, target string) *DelayProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &DelayProxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is where clients connect.
func (p *DelayProxy) Addr() string { return p.l.Addr().String() }

// SetDelay sets the delay of each direction: up (client to target) and
// down (target to client).
func (p *DelayProxy) SetDelay(up, down time.Duration) {
	p.mu.Lock()
	p.up, p.down = up, down
	p.mu.Unlock()
}

// Blackhole starts (true) or ends (false) a partition: nothing is
// delivered, in either direction, also of what is in flight.
func (p *DelayProxy) Blackhole(on bool) {
	p.mu.Lock()
	p.holes = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Reset closes every connection open now, both ends, as a reset from the
// network would; the proxy goes on accepting (and, while Blackhole is on,
// holds what the new connections carry). A client then gives up its
// connections at once instead of after its keepalive's timeout.
func (p *DelayProxy) Reset() {
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
}

// Close stops the proxy and closes every connection.
func (p *DelayProxy) Close() {
	p.l.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *DelayProxy) accept() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			in.Close()
			out.Close()
			return
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(out, in, true)
		go p.pipe(in, out, false)
	}
}

type chunk struct {
	due  time.Time
	data []byte
}

// pipe reads src and hands every chunk to a writer that delivers it its
// delay after it was read.
func (p *DelayProxy) pipe(dst, src net.Conn, up bool) {
	q := make(chan chunk, 1024)
	go func() {
		defer dst.Close()
		for c := range q {
			time.Sleep(time.Until(c.due))
			p.mu.Lock()
			for p.holes && !p.closed {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, err := dst.Write(c.data); err != nil {
				return
			}
		}
	}()
	defer close(q)
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			d := p.down
			if up {
				d = p.up
			}
			p.mu.Unlock()
			q <- chunk{due: time.Now().Add(d), data: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			return
		}
	}
}
