package zktest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/failoverd/failoverd/test/netproxy"
)

// ZooKeeper request opcodes a LossProxy can match.
const (
	OpCreate  int32 = 1
	OpDelete  int32 = 2
	OpMulti   int32 = 14
	OpCreate2 int32 = 15
)

// maxLossFrame bounds one frame; ZooKeeper's own default (jute.maxbuffer) is
// about 1 MB, so anything much larger is a framing error.
const maxLossFrame = 16 << 20

// LossProxy is a loopback TCP proxy that follows ZooKeeper's framing in
// both directions (a 4-byte big-endian length, then the body; after the
// connect request and response, requests start with xid and opcode and
// replies with xid, zxid and error code). It can lose the reply to chosen
// requests: the request reaches the server, which applies it, and the
// connection is cut when its reply comes back, before the client sees it.
// That is the one fault a plain byte proxy cannot make on purpose: the
// client cannot tell whether its create or delete happened, or whether its
// AddAuth was answered. (FrameProxy hands every frame of one fixed target
// to a callback; LossProxy arms losses by opcode and path, follows a
// restarted server and can refuse connections, for the chaos suite.)
type LossProxy struct {
	l      net.Listener
	target func() string

	conns netproxy.ConnSet

	mu     sync.Mutex
	rules  []*lossRule
	lost   []LostReply
	onLoss func(LostReply)
	refuse bool
}

// Refuse makes the proxy close every connection (open ones at once, new
// ones as soon as they are accepted), like a server that is down: a client
// moves on to its next server right away, instead of waiting out a
// timeout as it would on a blackhole. Refuse(false) ends it.
func (p *LossProxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
	if on {
		p.Reset()
	}
}

// OnLoss sets a function called (without locks held) for every reply lost
// and every request dropped.
func (p *LossProxy) OnLoss(f func(LostReply)) {
	p.mu.Lock()
	p.onLoss = f
	p.mu.Unlock()
}

// LostReply describes a reply the proxy did not deliver, or (Dropped) a
// request it did not forward.
type LostReply struct {
	Op      int32
	Xid     int32
	Path    string // for create and delete
	Dropped bool   // the request never reached the server
}

func (r LostReply) String() string {
	return fmt.Sprintf("op=%d xid=%d path=%s dropped=%t", r.Op, r.Xid, r.Path, r.Dropped)
}

type lossRule struct {
	left  int
	drop  bool
	match func(op int32, path string) bool
	hooks LossHooks
}

// LossHooks let a fault act at the moment an armed loss happens.
type LossHooks struct {
	// Before runs when a matching request arrives, and the request waits
	// for it; seen is the highest zxid the client has been told on that
	// connection (in its connect request or a reply since), which a server
	// it reconnects to must have reached.
	Before func(seen int64)
	// After runs once the reply was held back, before the connection is
	// cut: the client cannot reconnect before it returned.
	After func()
}

// NewLossProxy listens on a free loopback port and forwards to the address
// target returns at connect time.
func NewLossProxy(t testing.TB, target func() string) *LossProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &LossProxy{l: l, target: target}
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is where clients connect.
func (p *LossProxy) Addr() string { return p.l.Addr().String() }

// LoseReplies arms the proxy to lose the replies of the next n requests
// (on any connection) for which match returns true. path is the znode path
// of a create or delete request, "" for other opcodes.
func (p *LossProxy) LoseReplies(n int, match func(op int32, path string) bool) {
	p.mu.Lock()
	p.rules = append(p.rules, &lossRule{left: n, match: match})
	p.mu.Unlock()
}

// LoseRepliesHooked is LoseReplies with hooks around each loss.
func (p *LossProxy) LoseRepliesHooked(n int, match func(op int32, path string) bool, h LossHooks) {
	p.mu.Lock()
	p.rules = append(p.rules, &lossRule{left: n, match: match, hooks: h})
	p.mu.Unlock()
}

// DropRequests arms the proxy to cut the connection instead of forwarding
// the next n matching requests: the server never sees them.
func (p *LossProxy) DropRequests(n int, match func(op int32, path string) bool) {
	p.mu.Lock()
	p.rules = append(p.rules, &lossRule{left: n, drop: true, match: match})
	p.mu.Unlock()
}

// Disarm drops every armed loss that has not happened yet.
func (p *LossProxy) Disarm() {
	p.mu.Lock()
	p.rules = nil
	p.mu.Unlock()
}

// Lost returns the replies lost so far.
func (p *LossProxy) Lost() []LostReply {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]LostReply(nil), p.lost...)
}

// Reset closes every open connection.
func (p *LossProxy) Reset() { p.conns.CloseAll() }

// Close stops the proxy and closes every connection.
func (p *LossProxy) Close() {
	p.l.Close()
	p.Reset()
}

// take returns the armed loss a request matches (it then loses its reply,
// or with drop is not forwarded at all), using it up; nil if none.
func (p *LossProxy) take(op int32, path string) *lossRule {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range p.rules {
		if r.match(op, path) {
			r.left--
			if r.left <= 0 {
				p.rules = append(p.rules[:i], p.rules[i+1:]...)
			}
			return r
		}
	}
	return nil
}

func (p *LossProxy) record(lr LostReply) {
	p.mu.Lock()
	p.lost = append(p.lost, lr)
	cb := p.onLoss
	p.mu.Unlock()
	if cb != nil {
		cb(lr)
	}
}

func (p *LossProxy) accept() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.serve(in)
	}
}

// frameConn is one proxied client connection.
type frameConn struct {
	mu     sync.Mutex
	doomed map[int32]doomed // xid -> request whose reply must be lost
	seen   int64            // the highest zxid the client was told
}

type doomed struct {
	lr    LostReply
	after func()
}

func (fc *frameConn) see(zxid int64) {
	fc.mu.Lock()
	fc.seen = max(fc.seen, zxid)
	fc.mu.Unlock()
}

func (fc *frameConn) lastSeen() int64 {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.seen
}

func (p *LossProxy) serve(in net.Conn) {
	p.mu.Lock()
	refuse := p.refuse
	p.mu.Unlock()
	if refuse {
		in.Close()
		return
	}
	p.conns.Add(in)
	out, err := net.Dial("tcp", p.target())
	if err != nil {
		in.Close()
		return
	}
	p.conns.Add(out)
	fc := &frameConn{doomed: map[int32]doomed{}}
	go p.replies(fc, in, out)
	p.requests(fc, in, out)
}

// requests forwards client frames to the server, marking the requests whose
// reply is to be lost before forwarding them.
func (p *LossProxy) requests(fc *frameConn, in, out net.Conn) {
	defer in.Close()
	defer out.Close()
	first := true
	for {
		frame, err := readLossFrame(in)
		if err != nil {
			return
		}
		if first && len(frame) >= 16 { // protocol version, last zxid seen, ...
			fc.see(int64(binary.BigEndian.Uint64(frame[8:])))
		}
		if !first && len(frame) >= 12 {
			xid := int32(binary.BigEndian.Uint32(frame[4:]))
			op := int32(binary.BigEndian.Uint32(frame[8:]))
			path := ""
			switch op {
			case OpCreate, OpDelete, OpCreate2:
				path = requestPath(frame[12:])
			case OpMulti:
				path = multiPaths(frame[12:])
			}
			switch r := p.take(op, path); {
			case r == nil:
			case r.drop:
				p.record(LostReply{Op: op, Xid: xid, Path: path, Dropped: true})
				return // the deferred closes cut the connection
			default:
				if r.hooks.Before != nil {
					r.hooks.Before(fc.lastSeen())
				}
				fc.mu.Lock()
				fc.doomed[xid] = doomed{lr: LostReply{Op: op, Xid: xid, Path: path}, after: r.hooks.After}
				fc.mu.Unlock()
			}
		}
		first = false
		if _, err := out.Write(frame); err != nil {
			return
		}
	}
}

// replies forwards server frames to the client; at the reply to a doomed
// request it cuts both connections instead.
func (p *LossProxy) replies(fc *frameConn, in, out net.Conn) {
	defer in.Close()
	defer out.Close()
	first := true
	for {
		frame, err := readLossFrame(out)
		if err != nil {
			return
		}
		if !first && len(frame) >= 16 {
			xid := int32(binary.BigEndian.Uint32(frame[4:]))
			fc.mu.Lock()
			d, ok := fc.doomed[xid]
			delete(fc.doomed, xid)
			fc.mu.Unlock()
			if ok {
				p.record(d.lr)
				if d.after != nil {
					d.after()
				}
				return // the deferred closes cut the connection
			}
			if xid >= 0 { // a reply (not a ping or a notification): the client sees its zxid
				fc.see(int64(binary.BigEndian.Uint64(frame[8:])))
			}
		}
		first = false
		if _, err := in.Write(frame); err != nil {
			return
		}
	}
}

// readLossFrame reads one frame and returns it with its length prefix.
func readLossFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxLossFrame {
		return nil, errors.New("zktest: frame too large")
	}
	b := make([]byte, 4+n)
	copy(b, hdr[:])
	_, err := io.ReadFull(r, b[4:])
	return b, err
}

// requestPath decodes the jute string at the start of a create or delete body.
func requestPath(b []byte) string {
	path, _ := juteString(b)
	return path
}

// juteString decodes a jute string (or buffer) and returns the rest; "",
// nil when b does not hold one.
func juteString(b []byte) (string, []byte) {
	if len(b) < 4 {
		return "", nil
	}
	n := int32(binary.BigEndian.Uint32(b))
	if n < 0 || int(n) > len(b)-4 {
		return "", nil
	}
	return string(b[4 : 4+n]), b[4+n:]
}

// multiOpNames names the operations a multi can hold (ZooKeeper's
// opcodes), as multiPaths writes them.
var multiOpNames = map[int32]string{OpCreate: "create", OpDelete: "delete", 5: "set", 13: "check", OpCreate2: "create", 19: "create"}

// multiPaths describes a multi request's operations, "delete /a; check /b",
// for the matchers of a LossProxy (the path they get for OpMulti). It stops
// at an operation it cannot decode.
func multiPaths(b []byte) string {
	var ops []string
	for len(b) >= 9 { // header: type, done, err
		op := int32(binary.BigEndian.Uint32(b))
		done := b[4] != 0
		b = b[9:]
		name, ok := multiOpNames[op]
		if done || !ok {
			break
		}
		path, rest := juteString(b)
		if rest == nil {
			break
		}
		ops = append(ops, name+" "+path)
		if b = skipMultiOp(op, rest); b == nil {
			break
		}
	}
	return strings.Join(ops, "; ")
}

// skipMultiOp skips what follows the path of one operation of a multi.
func skipMultiOp(op int32, b []byte) []byte {
	field := func(n int) {
		if b != nil && len(b) >= n {
			b = b[n:]
		} else {
			b = nil
		}
	}
	str := func() {
		if b != nil {
			_, b = juteString(b)
		}
	}
	switch op {
	case OpDelete, 13: // version
		field(4)
	case 5: // data, version
		str()
		field(4)
	default: // create: data, acl vector, flags
		str()
		if b == nil || len(b) < 4 {
			return nil
		}
		n := int32(binary.BigEndian.Uint32(b))
		field(4)
		for range max(n, 0) {
			field(4) // perms
			str()    // scheme
			str()    // id
		}
		field(4)
	}
	return b
}
