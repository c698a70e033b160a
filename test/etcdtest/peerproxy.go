package etcdtest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// peerProxy stands in front of one member's peer listener: every peer
// reaches the member through it. It learns which member opened a
// connection (connOwner) when a cut needs to know, and holds the bytes of
// every connection whose link the cluster cuts (Cluster.cut), in both
// directions, without closing anything.
type peerProxy struct {
	c      *Cluster
	to     int // the member behind the proxy
	target string
	l      net.Listener

	mu     sync.Mutex
	cond   *sync.Cond
	closed bool
	conns  map[net.Conn]struct{}
}

func newPeerProxy(t testing.TB, c *Cluster, to int, target string) *peerProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &peerProxy{c: c, to: to, target: target, l: l, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// start accepts connections (once the cluster's members are all known).
func (p *peerProxy) start() { go p.accept() }

func (p *peerProxy) addr() string { return p.l.Addr().String() }

// changed wakes the connections waiting on a cut link: the cluster's cuts
// changed.
func (p *peerProxy) changed() {
	p.mu.Lock()
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *peerProxy) close() {
	p.l.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *peerProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *peerProxy) accept() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.serve(in)
	}
}

// peer is who opened one accepted connection, looked up (by scanning
// /proc) only once a cut needs it: a lookup per connection, with hundreds
// of peer connections opened a minute under load, took a core of the test
// process and starved the members' raft traffic that passes through it.
type peer struct {
	p    *peerProxy
	in   net.Conn
	once sync.Once
	from int
}

func (pr *peer) owner() int {
	pr.once.Do(func() { pr.from = pr.p.owner(pr.in) })
	return pr.from
}

// wait blocks while the link from pr's member is cut; false when the
// proxy closed.
func (p *peerProxy) wait(pr *peer) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.closed {
		from := -1 // not needed while no other member is isolated
		if p.c.othersIsolated(p.to) {
			p.mu.Unlock()
			from = pr.owner()
			p.mu.Lock()
			if p.closed {
				break
			}
		}
		if !p.c.cut(from, p.to) {
			return true
		}
		p.cond.Wait()
	}
	return false
}

func (p *peerProxy) serve(in net.Conn) {
	if !p.track(in) {
		return
	}
	from := &peer{p: p, in: in}
	if !p.wait(from) { // behind a partition the target sees nothing yet
		in.Close()
		return
	}
	out, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		in.Close()
		return
	}
	if !p.track(out) {
		in.Close()
		return
	}
	go p.pipe(out, in, from)
	p.pipe(in, out, from)
}

// pipe copies src to dst chunk by chunk, holding each chunk while the
// link is cut.
func (p *peerProxy) pipe(dst, src net.Conn, from *peer) {
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait(from) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// owner returns the index of the member whose etcd process opened in
// (-1: none found; such a link is cut only when the target is isolated).
// A connection's other end is in its owner's file table before the
// proxy accepts it, but /proc may lag an instant: it looks a few times.
func (p *peerProxy) owner(in net.Conn) int {
	remote, ok := in.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return -1
	}
	for range 5 {
		if pid := connOwner(remote, p.c.pids()); pid != 0 {
			return p.c.memberOf(pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1
}

// connOwner returns which of pids holds the TCP socket whose local
// address is addr (0: none): the socket's inode from /proc/net/tcp, then
// the process whose file table has it.
func connOwner(addr *net.TCPAddr, pids []int) int {
	inode := socketInode(addr)
	if inode == "" {
		return 0
	}
	want := "socket:[" + inode + "]"
	for _, pid := range pids {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
			if err == nil && l == want {
				return pid
			}
		}
	}
	return 0
}

// socketInode finds the inode of the IPv4 TCP socket bound locally to
// addr in /proc/net/tcp ("" when there is none).
func socketInode(addr *net.TCPAddr) string {
	ip := addr.IP.To4()
	if ip == nil {
		return ""
	}
	// /proc/net/tcp prints the address as the 32-bit word in host order
	// (little-endian here) and the port big-endian, both in hex.
	local := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], addr.Port)
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[1] != local {
			continue
		}
		if _, err := strconv.ParseUint(fields[9], 10, 64); err == nil && fields[9] != "0" {
			return fields[9]
		}
	}
	return ""
}
