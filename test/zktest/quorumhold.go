package zktest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/netproxy"
)

// # A follower that lags
//
// A ZooKeeper follower answers reads from its own copy, which may be behind
// the leader's: a client whose last seen zxid the follower has reached can
// connect to it (a reconnect only needs the leader to revalidate the
// session) and read state that writes already committed elsewhere have
// changed. ZooKeeper promises no more; a client that needs the leader's view
// calls sync first. Over a plain TCP link the window is small (the follower
// receives every commit before the revalidation it asked for, and only its
// commit processor can be late), so HoldCommits widens it on purpose: the
// leader's proposals, commits and sync answers to follower i are held by
// its quorum proxy while pings and session revalidations still pass, as if
// the follower's commit processor were stuck. Its clients can connect and
// read; their syncs and writes wait, like everything the follower would
// apply, until the hold ends and the held packets flow in order.
//
// The quorum proxies therefore follow the leader-to-follower stream packet by
// packet (jute's QuorumPacket: type, zxid, data, auth info). The snapshot a
// leader streams after SNAP is not framed that way: it is copied as bytes
// up to its signature. A stream the parser cannot follow is copied as bytes
// to its end, and that link cannot hold.

// Quorum packet types (org.apache.zookeeper.server.quorum.Leader) that the
// hold looks at.
const (
	qpPing       int32 = 5
	qpRevalidate int32 = 6
	qpUpToDate   int32 = 12
	qpSnap       int32 = 15
)

// maxQuorumField bounds one length field; anything larger is not framing
// this parser knows (it then copies the rest as bytes).
const maxQuorumField = 64 << 20

var errUnframed = errors.New("zktest: not a quorum packet")

// quorumProxy is a proxy of a quorum link (netproxy.Proxy) that forwards
// the leader's side packet by packet, so that HoldCommits can hold some.
type quorumProxy struct {
	*netproxy.Proxy
	mu          sync.Mutex
	holdCommits bool
	conns       map[*quorumConn]struct{}
}

// newQuorumProxy listens for a quorum link to target; Start it.
func newQuorumProxy(t testing.TB, target func() string) *quorumProxy {
	p := &quorumProxy{Proxy: netproxy.Listen(t, target, true)}
	p.SetFromTarget(p.pipeQuorum)
	return p
}

// quorumConn is the leader-to-follower side of one proxied quorum link.
type quorumConn struct {
	mu     sync.Mutex
	dst    net.Conn
	synced bool // UPTODATE seen: from here on only quorum packets, holdable
	raw    bool // not framed as expected: copied as bytes, never held
	held   [][]byte
	cut    atomic.Bool // Resync closed it
}

// holdable reports whether the connection can hold packets now.
func (q *quorumConn) holdable() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.synced && !q.raw && !q.cut.Load()
}

// send forwards pkt, or keeps it while p holds commits: pings and
// revalidations pass, the rest waits in order. Once the hold ends, held
// packets go first.
func (q *quorumConn) send(p *quorumProxy, pkt []byte, typ int32) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	p.mu.Lock()
	hold := p.holdCommits && q.synced
	p.mu.Unlock()
	switch {
	case hold && (typ == qpPing || typ == qpRevalidate):
		return p.Forward(q.dst, pkt)
	case hold:
		q.held = append(q.held, pkt)
		return true
	}
	if !q.flushLocked(p) {
		return false
	}
	if typ == qpUpToDate {
		q.synced = true
	}
	return p.Forward(q.dst, pkt)
}

func (q *quorumConn) flushLocked(p *quorumProxy) bool {
	for len(q.held) > 0 {
		if !p.Forward(q.dst, q.held[0]) {
			return false
		}
		q.held = q.held[1:]
	}
	return true
}

// pipeQuorum forwards the leader's side of a quorum link (src) to the
// follower (dst) packet by packet, so that HoldCommits can hold some.
func (p *quorumProxy) pipeQuorum(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	q := &quorumConn{dst: dst}
	p.mu.Lock()
	if p.conns == nil {
		p.conns = map[*quorumConn]struct{}{}
	}
	p.conns[q] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, q)
		p.mu.Unlock()
	}()
	r := bufio.NewReaderSize(src, 64<<10)
	for {
		pkt, typ, err := readQuorumPacket(r)
		if errors.Is(err, errUnframed) {
			// Forward what was read, then copy bytes to the end.
			q.mu.Lock()
			q.raw = true
			ok := q.flushLocked(p) && p.Forward(dst, pkt)
			q.mu.Unlock()
			if ok {
				p.copyRaw(dst, r)
			}
			return
		}
		if err != nil {
			return // the link is closing
		}
		if !q.send(p, pkt, typ) {
			return
		}
		if typ == qpSnap && !p.copySnapshot(dst, r) {
			return
		}
	}
}

// snapSignature ends the snapshot a leader streams after SNAP (the jute
// string "BenWasHere"); quorum packets follow it.
var snapSignature = []byte("\x00\x00\x00\x0aBenWasHere")

// copySnapshot forwards the snapshot that follows a SNAP packet, up to and
// including its signature. (A znode whose data held the signature would end
// it early; no test writes one.)
func (p *quorumProxy) copySnapshot(dst net.Conn, r *bufio.Reader) bool {
	chunk := make([]byte, 0, 32<<10)
	last := make([]byte, 0, 2*len(snapSignature)) // the stream's tail, across chunks
	for {
		b, err := r.ReadByte()
		if err != nil {
			return false
		}
		chunk = append(chunk, b)
		if len(last) == cap(last) {
			last = append(last[:0], last[len(last)-len(snapSignature)+1:]...)
		}
		last = append(last, b)
		done := bytes.HasSuffix(last, snapSignature)
		if done || len(chunk) == cap(chunk) {
			if !p.Forward(dst, chunk) {
				return false
			}
			if done {
				return true
			}
			chunk = chunk[:0]
		}
	}
}

// copyRaw forwards the rest of r as bytes.
func (p *quorumProxy) copyRaw(dst net.Conn, r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 && !p.Forward(dst, buf[:n]) {
			return
		}
		if err != nil {
			return
		}
	}
}

// readQuorumPacket reads one jute-serialized QuorumPacket (int type, long
// zxid, buffer data, vector<Id> authinfo) and returns its bytes. With
// errUnframed, the bytes read so far are returned and the stream is not
// framed as expected from there on.
func readQuorumPacket(r *bufio.Reader) ([]byte, int32, error) {
	pkt := make([]byte, 0, 64)
	read := func(n int) ([]byte, error) {
		start := len(pkt)
		pkt = append(pkt, make([]byte, n)...)
		_, err := io.ReadFull(r, pkt[start:])
		return pkt[start:], err
	}
	length := func() (int, error) { // a jute length: -1 (null) or a count
		b, err := read(4)
		if err != nil {
			return 0, err
		}
		n := int32(binary.BigEndian.Uint32(b))
		if n < -1 || n > maxQuorumField {
			return 0, errUnframed
		}
		return max(int(n), 0), nil
	}
	bytesField := func() error {
		n, err := length()
		if err == nil {
			_, err = read(n)
		}
		return err
	}
	hdr, err := read(12)
	if err != nil {
		return pkt, 0, err
	}
	typ := int32(binary.BigEndian.Uint32(hdr))
	if err := bytesField(); err != nil { // data
		return pkt, typ, err
	}
	ids, err := length() // authinfo
	if err != nil {
		return pkt, typ, err
	}
	for range ids {
		if err := bytesField(); err != nil { // scheme
			return pkt, typ, err
		}
		if err := bytesField(); err != nil { // id
			return pkt, typ, err
		}
	}
	return pkt, typ, nil
}

// holdQuorum starts or ends the hold on every connection of the proxy and
// returns how many connections hold (or, when ending, held) packets.
func (p *quorumProxy) holdQuorum(on bool) int {
	p.mu.Lock()
	p.holdCommits = on
	qs := make([]*quorumConn, 0, len(p.conns))
	for q := range p.conns {
		qs = append(qs, q)
	}
	p.mu.Unlock()
	n := 0
	for _, q := range qs {
		if q.holdable() {
			n++
		}
		if !on {
			q.mu.Lock()
			q.flushLocked(p)
			q.mu.Unlock()
		}
	}
	return n
}

// HoldCommits makes follower i (0-based) lag (on) or catch up (off): see
// "A follower that lags". It returns the number of links to a leader that
// hold; 0 means the hold has no effect (i leads, or its link to the
// leader was synced by snapshot). It needs Options.ProxyQuorum.
func (c *Cluster) HoldCommits(i int, on bool) int {
	c.t.Helper()
	if c.links == nil {
		c.t.Fatal("zktest: HoldCommits needs Options.ProxyQuorum")
	}
	n := 0
	for _, l := range c.links[i] {
		if l != nil {
			n += l.quorum.holdQuorum(on)
		}
	}
	return n
}

// CanHoldCommits reports whether follower i's link to its leader can hold
// (see HoldCommits) right now.
func (c *Cluster) CanHoldCommits(i int) bool {
	c.t.Helper()
	if c.links == nil {
		c.t.Fatal("zktest: CanHoldCommits needs Options.ProxyQuorum")
	}
	for _, l := range c.links[i] {
		if l == nil {
			continue
		}
		l.quorum.mu.Lock()
		qs := make([]*quorumConn, 0, len(l.quorum.conns))
		for q := range l.quorum.conns {
			qs = append(qs, q)
		}
		l.quorum.mu.Unlock()
		for _, q := range qs {
			if q.holdable() {
				return true
			}
		}
	}
	return false
}

// Resync cuts follower i's link to its leader (a reset, not a partition):
// it looks for the leader again at once and syncs anew, by diff when it
// is close behind, which HoldCommits can then hold.
func (c *Cluster) Resync(i int) {
	c.t.Helper()
	if c.links == nil {
		c.t.Fatal("zktest: Resync needs Options.ProxyQuorum")
	}
	for _, l := range c.links[i] {
		if l == nil {
			continue
		}
		l.quorum.mu.Lock()
		for q := range l.quorum.conns {
			q.cut.Store(true) // no longer holdable, even before it is gone
		}
		l.quorum.mu.Unlock()
		l.quorum.Reset()
	}
}

// Holdable makes sure follower i's link to its leader can hold: when it
// was synced by snapshot (a follower that joined late), Resync makes it sync
// again, by diff. It reports whether the link can hold within timeout.
func (c *Cluster) Holdable(i int, timeout time.Duration) bool {
	c.t.Helper()
	if c.CanHoldCommits(i) {
		return true
	}
	c.Resync(i)
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if c.CanHoldCommits(i) {
			return true
		}
	}
	return false
}

// Zxid is the last zxid the server at addr has applied, from srvr.
func Zxid(addr string) (int64, error) {
	out, err := FourLetter(addr, "srvr")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Zxid: "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 0, 64)
		}
	}
	return 0, fmt.Errorf("zktest: no Zxid in srvr of %s", addr)
}
