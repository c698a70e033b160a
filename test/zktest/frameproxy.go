package zktest

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/netproxy"
)

// Dir is the direction of a frame through a FrameProxy.
type Dir int

// Frame directions.
const (
	ToServer Dir = iota // client to server: the connect request, then requests
	ToClient            // server to client: the connect response, then replies
)

// Frame is one length-prefixed ZooKeeper protocol frame seen by a
// FrameProxy: Body is the frame without its 4-byte length.
type Frame struct {
	Conn int // connection number, from 0, in accept order
	Dir  Dir
	Seq  int // frame number on this connection in this direction, from 0
	Body []byte
}

// Op is the request's opcode (ToServer frames after the connect request).
func (f Frame) Op() int32 {
	if f.Dir != ToServer || f.Seq == 0 || len(f.Body) < 8 {
		return 0
	}
	return int32(binary.BigEndian.Uint32(f.Body[4:]))
}

// Opcodes a FrameFunc may look for.
const (
	OpSetAuth int32 = 100
	OpPing    int32 = 11
)

// Action is what a FrameProxy does with a frame.
type Action int

// Actions.
const (
	Forward Action = iota // pass the (possibly rewritten) body on
	Drop                  // close both sides of this connection instead
)

// FrameFunc decides what happens to each frame; it may rewrite f.Body in
// place (keeping its length). It is called from one goroutine per direction
// and connection, so it must be safe for concurrent use.
type FrameFunc func(f *Frame) Action

// FrameProxy is a loopback proxy to one ZooKeeper server that understands
// the protocol's framing, so a test can act on exact protocol steps: drop
// the connection right after the session handshake, while a request is in
// flight, rewrite a request.
type FrameProxy struct {
	l      net.Listener
	target string
	fn     FrameFunc

	conns netproxy.ConnSet

	mu sync.Mutex
	n  int
}

// NewFrameProxy listens on a free loopback port and forwards to target.
func NewFrameProxy(t testing.TB, target string, fn FrameFunc) *FrameProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &FrameProxy{l: l, target: target, fn: fn}
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is where clients connect.
func (p *FrameProxy) Addr() string { return p.l.Addr().String() }

// Conns is the number of client connections accepted so far.
func (p *FrameProxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// Close stops the proxy and closes every connection.
func (p *FrameProxy) Close() {
	p.l.Close()
	p.conns.CloseAll()
}

func (p *FrameProxy) accept() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		id := p.n
		p.n++
		p.mu.Unlock()
		p.conns.Add(in)
		go p.serve(id, in)
	}
}

func (p *FrameProxy) serve(id int, in net.Conn) {
	out, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		in.Close()
		return
	}
	p.conns.Add(out)
	closeBoth := func() {
		in.Close()
		out.Close()
		p.conns.Remove(in, out)
	}
	go func() { p.pipe(id, ToClient, in, out); closeBoth() }()
	p.pipe(id, ToServer, out, in)
	closeBoth()
}

// pipe copies frames from src to dst until either side fails or the
// FrameFunc drops the connection.
func (p *FrameProxy) pipe(id int, dir Dir, dst, src net.Conn) {
	for seq := 0; ; seq++ {
		var hdr [4]byte
		if _, err := io.ReadFull(src, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > 16<<20 {
			return
		}
		f := &Frame{Conn: id, Dir: dir, Seq: seq, Body: make([]byte, n)}
		if _, err := io.ReadFull(src, f.Body); err != nil {
			return
		}
		if p.fn != nil && p.fn(f) == Drop {
			return
		}
		binary.BigEndian.PutUint32(hdr[:], uint32(len(f.Body)))
		if _, err := dst.Write(append(hdr[:], f.Body...)); err != nil {
			return
		}
	}
}
