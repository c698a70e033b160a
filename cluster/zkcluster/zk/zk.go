// Package zk is failoverd's only door to ZooKeeper. It wraps go-zookeeper so
// that nothing above it imports that library, and it adds what an
// HA daemon needs and the library does not give:
//
//   - One Session is exactly one ZooKeeper session. When the server expires
//     it, the Session is dead for good: every later call fails with
//     ErrSessionExpired, and no request queued under it can ever run under a
//     successor session. (go-zookeeper silently opens a new session and sends
//     queued requests on it; we refuse to dial once expiry was seen.) A Client
//     hands out a fresh Session when the previous one died.
//   - The negotiated session timeout, the session id and its password, read
//     from the server's connect response.
//   - A session is handed out only when it is usable: established and, with
//     Auth, authenticated. A connection lost while the credentials are in
//     flight is retried; credentials the server refuses close the session
//     and the Client opens a new one next time.
//   - Server names are resolved at dial time, on every attempt: a name that
//     does not resolve is skipped instead of failing every new session.
//   - Acks: the send and answer times of the newest answered writes, and
//     the connection each went over.
//     A write is answered only after the ZooKeeper *leader* committed it
//     with a quorum; the election lease is measured from them (see package
//     election). Reads, syncs and pings do not count: a follower cut off
//     from its leader keeps answering reads and pings from its local copy
//     for up to syncLimit × tickTime, and a leader cut off from its quorum
//     answers syncs until it notices, while the quorum expires the session
//     after one session timeout and lets a successor win.
package zk

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gozk "github.com/go-zookeeper/zk"
)

// Errors callers compare with errors.Is.
var (
	ErrNoNode         = errors.New("zk: node does not exist")
	ErrNodeExists     = errors.New("zk: node already exists")
	ErrBadVersion     = errors.New("zk: version conflict")
	ErrNotEmpty       = errors.New("zk: node has children")
	ErrNoAuth         = errors.New("zk: not authorized")
	ErrSessionExpired = errors.New("zk: session expired")
	ErrConnectionLoss = errors.New("zk: connection loss")
	ErrClosed         = errors.New("zk: session closed")
)

// CreateMode selects the kind of znode Create makes.
type CreateMode int32

// Znode kinds.
const (
	Persistent           CreateMode = 0
	Ephemeral            CreateMode = CreateMode(gozk.FlagEphemeral)
	PersistentSequential CreateMode = CreateMode(gozk.FlagSequence)
	EphemeralSequential  CreateMode = CreateMode(gozk.FlagEphemeral | gozk.FlagSequence)
)

// Stat is the znode metadata failoverd uses.
type Stat struct {
	Czxid          int64 // zxid of the create; ordered across the ensemble
	Mzxid          int64
	Version        int32 // data version, for compare-and-set
	Aversion       int32 // ACL version, for SetACL
	Cversion       int32
	EphemeralOwner int64 // session id owning an ephemeral node, 0 otherwise
	NumChildren    int32
	DataLength     int32
}

// EventType says what happened to a watched znode.
type EventType int

// Watch event types.
const (
	EventNodeCreated EventType = iota + 1
	EventNodeDeleted
	EventNodeDataChanged
	EventNodeChildrenChanged
	// EventNotWatching means the watch was dropped (session expired or closed)
	// and will never fire; Event.Err says why.
	EventNotWatching
)

// Event is one watch notification.
type Event struct {
	Type EventType
	Path string
	Err  error
}

// State is a session's connection state.
type State int

// Session states.
const (
	StateConnecting State = iota // no established session yet, or reconnecting
	StateConnected               // the session is established and a server answers
	StateExpired                 // the server expired the session; final
	StateClosed                  // we closed the session; final
)

func (s State) String() string {
	switch s {
	case StateConnecting:
		return "connecting"
	case StateConnected:
		return "connected"
	case StateExpired:
		return "expired"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Auth configures digest authentication. With it, every znode failoverd
// creates can be changed only by this identity; the world may read.
type Auth struct {
	User     string
	Password string
}

type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(f string, a ...any) { z.l.Debug(fmt.Sprintf(f, a...)) }

// Session is one ZooKeeper session. Its methods are safe for concurrent use.
type Session struct {
	client *Client
	log    *slog.Logger
	conn   *gozk.Conn

	established chan struct{} // closed once the first connect succeeded
	estOnce     sync.Once
	ready       chan struct{} // closed once setup (authentication) succeeded
	done        chan struct{} // closed when the session is expired or closed
	doneOnce    sync.Once
	life        context.Context // canceled when the session is over
	cancel      context.CancelFunc

	mu      sync.Mutex
	state   State
	changed chan struct{} // closed and replaced on every state change
	id      int64
	passwd  []byte
	timeout time.Duration
	err     error
	// setupErr says why setup failed for good (at setupAt); the session was
	// closed and never handed out.
	setupErr error
	setupAt  time.Time

	deadF atomic.Bool
	// conns counts connection attempts (dials): an answer observed while
	// it still has the value it had at the send went over one connection.
	conns atomic.Uint64
	ackMu sync.Mutex
	acks  []Ack // ring of the newest answered writes, oldest first

}

// Ack is one answered write of a session.
type Ack struct {
	Sent     time.Time // before the request was handed to the connection
	Answered time.Time // after its answer was seen
	// Conn identifies the connection (to one server) that carried both
	// the request and its answer; acks of different Conn values may have
	// gone through different servers.
	Conn uint64
	// Beat: the write was sent with a context from Beat and succeeded.
	Beat bool
}

type beatKey struct{}

// Beat marks the writes sent with the returned context as heartbeats:
// their acks carry Beat when they succeed, so that a lease can be made to
// run from those writes only (a successful heartbeat changes a znode that
// others can watch; see the election package).
func Beat(ctx context.Context) context.Context { return context.WithValue(ctx, beatKey{}, true) }

// ackRing is how many answered writes Acks keeps.
const ackRing = 32

// ID is the server's session id.
func (s *Session) ID() int64 { s.mu.Lock(); defer s.mu.Unlock(); return s.id }

// Password is the session password (tests use it to expire the session).
func (s *Session) Password() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.passwd...)
}

// Timeout is the session timeout the server negotiated.
func (s *Session) Timeout() time.Duration { s.mu.Lock(); defer s.mu.Unlock(); return s.timeout }

// State returns the current state and a channel closed at the next change.
func (s *Session) State() (State, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.changed
}

// Done is closed when the session is over (expired or closed).
func (s *Session) Done() <-chan struct{} { return s.done }

// Err says why the session is over: ErrSessionExpired or ErrClosed.
func (s *Session) Err() error { s.mu.Lock(); defer s.mu.Unlock(); return s.err }

// Conn identifies the session's current connection as Ack.Conn does: an
// ack carrying this value went over the connection in use now (during a
// reconnect, none does).
func (s *Session) Conn() uint64 { return s.conns.Load() }

// Acks returns the newest answered writes (at most ackRing), oldest answer
// first. Writes whose request and answer may have used different
// connections are left out.
func (s *Session) Acks() []Ack {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	return append([]Ack(nil), s.acks...)
}

func (s *Session) recordAck(a Ack) {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	if len(s.acks) == ackRing {
		copy(s.acks, s.acks[1:])
		s.acks = s.acks[:ackRing-1]
	}
	s.acks = append(s.acks, a)
}

// Close ends the session on the server, which deletes its ephemeral znodes.
func (s *Session) Close() {
	s.finish(StateClosed, ErrClosed)
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	conn.Close()
}

func (s *Session) dead() bool { return s.deadF.Load() }

func (s *Session) finish(st State, err error) {
	s.deadF.Store(true)
	s.mu.Lock()
	if s.state != StateExpired && s.state != StateClosed {
		s.state, s.err = st, err
		close(s.changed)
		s.changed = make(chan struct{})
	}
	s.mu.Unlock()
	s.doneOnce.Do(func() { close(s.done) })
	s.cancel()
}

// onEvent runs on go-zookeeper's event loop: it must never block.
func (s *Session) onEvent(ev gozk.Event) {
	if ev.Type != gozk.EventSession {
		return
	}
	switch ev.State {
	case gozk.StateHasSession:
		s.mu.Lock()
		if s.state == StateExpired || s.state == StateClosed {
			s.mu.Unlock()
			return
		}
		s.id = s.conn.SessionID()
		s.state = StateConnected
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
		s.estOnce.Do(func() { close(s.established) })
		s.log.Debug("session connected", "session_id", fmt.Sprintf("0x%x", s.ID()), "server", ev.Server)
	case gozk.StateDisconnected, gozk.StateConnecting:
		s.mu.Lock()
		if s.state == StateConnected {
			s.state = StateConnecting
			close(s.changed)
			s.changed = make(chan struct{})
		}
		s.mu.Unlock()
	case gozk.StateExpired:
		s.log.Info("session expired", "session_id", fmt.Sprintf("0x%x", s.ID()))
		s.finish(StateExpired, ErrSessionExpired)
		go func() { // Close blocks; never on the event loop
			s.mu.Lock()
			conn := s.conn
			s.mu.Unlock()
			conn.Close()
		}()
	}
}

// sniffConn reads the negotiated timeout, session id and password out of the
// server's connect response, the first frame on every connection.
type sniffConn struct {
	net.Conn
	s    *Session
	buf  []byte
	done bool
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done && n > 0 {
		c.buf = append(c.buf, p[:n]...)
		c.parse()
	}
	return n, err
}

func (c *sniffConn) parse() {
	if len(c.buf) < 4 {
		return
	}
	size := int(binary.BigEndian.Uint32(c.buf))
	if len(c.buf) < 4+size {
		return
	}
	c.done = true
	b := c.buf[4 : 4+size]
	c.buf = nil
	// protocolVersion int32, timeOut int32, sessionId int64, passwd buffer
	if len(b) < 20 {
		return
	}
	timeout := time.Duration(int32(binary.BigEndian.Uint32(b[4:]))) * time.Millisecond
	id := int64(binary.BigEndian.Uint64(b[8:]))
	plen := int(int32(binary.BigEndian.Uint32(b[16:])))
	if id == 0 || plen < 0 || len(b) < 20+plen {
		return
	}
	c.s.mu.Lock()
	c.s.timeout = timeout
	c.s.passwd = append([]byte(nil), b[20:20+plen]...)
	c.s.mu.Unlock()
}

// call runs a read: its answer may come from a follower's local copy, so it
// does not go into Acks.
func (s *Session) call(ctx context.Context, op func() error) error {
	return s.do(ctx, false, op)
}

// write runs a write: it is answered only after the ZooKeeper leader
// committed it with a quorum, so an answer goes into Acks.
func (s *Session) write(ctx context.Context, op func() error) error {
	return s.do(ctx, true, op)
}

// do runs op, records the ack time when viaLeader and the server answered,
// and maps errors. go-zookeeper calls take no context; a call abandoned on
// ctx ends by itself when the connection flushes its requests.
func (s *Session) do(ctx context.Context, viaLeader bool, op func() error) error {
	if s.dead() {
		return s.Err()
	}
	conn := s.conns.Load()
	start := time.Now()
	errc := make(chan error, 1)
	go func() { errc <- op() }()
	select {
	case err := <-errc:
		err = mapErr(err)
		if viaLeader && answered(err) {
			if s.conns.Load() == conn {
				beat, _ := ctx.Value(beatKey{}).(bool)
				s.recordAck(Ack{Sent: start, Answered: time.Now(), Conn: conn, Beat: beat && err == nil})
			}
		}
		if errors.Is(err, ErrSessionExpired) {
			s.finish(StateExpired, ErrSessionExpired)
		}
		if s.dead() && errors.Is(err, ErrConnectionLoss) {
			return s.Err()
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// answered reports whether a write's outcome came from the ZooKeeper
// leader's pipeline. Not ErrNoAuth: a server with eager ACL checks refuses
// a write locally, before forwarding it.
func answered(err error) bool {
	switch {
	case err == nil,
		errors.Is(err, ErrNoNode), errors.Is(err, ErrNodeExists),
		errors.Is(err, ErrBadVersion), errors.Is(err, ErrNotEmpty):
		return true
	}
	return false
}

func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, gozk.ErrNoNode):
		return ErrNoNode
	case errors.Is(err, gozk.ErrNodeExists):
		return ErrNodeExists
	case errors.Is(err, gozk.ErrBadVersion):
		return ErrBadVersion
	case errors.Is(err, gozk.ErrNotEmpty):
		return ErrNotEmpty
	case errors.Is(err, gozk.ErrNoAuth), errors.Is(err, gozk.ErrAuthFailed):
		return ErrNoAuth
	case errors.Is(err, gozk.ErrSessionExpired):
		return ErrSessionExpired
	case errors.Is(err, gozk.ErrConnectionClosed), errors.Is(err, gozk.ErrNoServer),
		errors.Is(err, gozk.ErrClosing), errors.Is(err, gozk.ErrSessionMoved):
		return fmt.Errorf("%w: %v", ErrConnectionLoss, err)
	}
	return fmt.Errorf("zk: %w", err)
}

func toStat(st *gozk.Stat) Stat {
	if st == nil {
		return Stat{}
	}
	return Stat{
		Czxid: st.Czxid, Mzxid: st.Mzxid, Version: st.Version, Cversion: st.Cversion, Aversion: st.Aversion,
		EphemeralOwner: st.EphemeralOwner, NumChildren: st.NumChildren, DataLength: st.DataLength,
	}
}

// Create makes a znode with the client's ACL and returns its actual path
// (with the sequence suffix for sequential modes) and its Stat.
func (s *Session) Create(ctx context.Context, p string, data []byte, mode CreateMode) (string, Stat, error) {
	var got string
	err := s.write(ctx, func() (err error) {
		got, err = s.conn.Create(p, data, int32(mode), s.client.acl)
		return err
	})
	if err != nil {
		return "", Stat{}, err
	}
	got = strings.Clone(got)
	// Create's reply carries no Stat; read it (czxid is the epoch source).
	ok, st, err := s.Exists(ctx, got)
	if err == nil && !ok {
		err = ErrNoNode
	}
	return got, st, err
}

// EnsurePath creates p and its missing parents as persistent znodes. With
// Auth, the ones that already existed must pass CheckACLs' rule (and are
// fixed when they are ours): a parent someone else may change would let
// them delete or replace what we create below it.
func (s *Session) EnsurePath(ctx context.Context, p string) error {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	cur := ""
	for _, part := range parts {
		cur += "/" + part
		err := s.write(ctx, func() error {
			_, err := s.conn.Create(cur, nil, 0, s.client.acl)
			return err
		})
		if errors.Is(err, ErrNodeExists) && s.client.cfg.Auth != nil {
			if _, err := s.checkACL(ctx, cur); err != nil {
				return err
			}
			continue
		}
		if err != nil && !errors.Is(err, ErrNodeExists) {
			return fmt.Errorf("creating %s: %w", cur, err)
		}
	}
	return nil
}

// Get reads a znode's data.
func (s *Session) Get(ctx context.Context, p string) ([]byte, Stat, error) {
	var data []byte
	var st *gozk.Stat
	err := s.call(ctx, func() (err error) { data, st, err = s.conn.Get(p); return })
	if err != nil { // on ctx cancel the call still runs: touch nothing it writes
		return nil, Stat{}, err
	}
	return data, toStat(st), nil
}

// Set writes data if the znode's version matches (-1: any version).
func (s *Session) Set(ctx context.Context, p string, data []byte, version int32) (Stat, error) {
	var st *gozk.Stat
	err := s.write(ctx, func() (err error) { st, err = s.conn.Set(p, data, version); return })
	if err != nil {
		return Stat{}, err
	}
	return toStat(st), nil
}

// Delete removes a znode if its version matches (-1: any version).
func (s *Session) Delete(ctx context.Context, p string, version int32) error {
	return s.write(ctx, func() error { return s.conn.Delete(p, version) })
}

// Sync makes the server this session talks to catch up with the ZooKeeper
// leader: a read made after it sees everything the leader had committed
// when it handled the sync. It proves nothing about the quorum (a leader
// cut off from its quorum answers syncs until it notices, up to syncLimit
// ticks), so it runs as a read and does not go into Acks.
func (s *Session) Sync(ctx context.Context, p string) error {
	return s.call(ctx, func() error { _, err := s.conn.Sync(p); return err })
}

// Exists reports whether the znode exists.
func (s *Session) Exists(ctx context.Context, p string) (bool, Stat, error) {
	var ok bool
	var st *gozk.Stat
	err := s.call(ctx, func() (err error) { ok, st, err = s.conn.Exists(p); return })
	if err != nil {
		return false, Stat{}, err
	}
	return ok, toStat(st), nil
}

// ExistsW is Exists plus a one-shot watch on creation, deletion or change.
// The channel delivers exactly one Event and is then closed.
func (s *Session) ExistsW(ctx context.Context, p string) (bool, Stat, <-chan Event, error) {
	var ok bool
	var st *gozk.Stat
	var ch <-chan gozk.Event
	err := s.call(ctx, func() (err error) { ok, st, ch, err = s.conn.ExistsW(p); return })
	if err != nil {
		return false, Stat{}, nil, err
	}
	return ok, toStat(st), s.forward(ch), nil
}

// GetW is Get plus a one-shot watch on deletion or change.
func (s *Session) GetW(ctx context.Context, p string) ([]byte, Stat, <-chan Event, error) {
	var data []byte
	var st *gozk.Stat
	var ch <-chan gozk.Event
	err := s.call(ctx, func() (err error) { data, st, ch, err = s.conn.GetW(p); return })
	if err != nil {
		return nil, Stat{}, nil, err
	}
	return data, toStat(st), s.forward(ch), nil
}

// Children lists a znode's children (names, not paths).
func (s *Session) Children(ctx context.Context, p string) ([]string, error) {
	var kids []string
	err := s.call(ctx, func() (err error) { kids, _, err = s.conn.Children(p); return })
	if err != nil {
		return nil, err
	}
	return kids, nil
}

// ChildrenW lists children and watches for a change of the list.
func (s *Session) ChildrenW(ctx context.Context, p string) ([]string, <-chan Event, error) {
	var kids []string
	var ch <-chan gozk.Event
	err := s.call(ctx, func() (err error) { kids, _, ch, err = s.conn.ChildrenW(p); return })
	if err != nil {
		return nil, nil, err
	}
	return kids, s.forward(ch), nil
}

func (s *Session) forward(in <-chan gozk.Event) <-chan Event {
	out := make(chan Event, 1)
	go func() {
		defer close(out)
		ev, ok := <-in
		if !ok {
			out <- Event{Type: EventNotWatching, Err: ErrClosed}
			return
		}
		e := Event{Path: ev.Path}
		switch ev.Type {
		case gozk.EventNodeCreated:
			e.Type = EventNodeCreated
		case gozk.EventNodeDeleted:
			e.Type = EventNodeDeleted
		case gozk.EventNodeDataChanged:
			e.Type = EventNodeDataChanged
		case gozk.EventNodeChildrenChanged:
			e.Type = EventNodeChildrenChanged
		default:
			e.Type, e.Err = EventNotWatching, mapErr(ev.Err)
			if e.Err == nil {
				e.Err = ErrConnectionLoss
			}
		}
		if e.Type != EventNotWatching {
			s.client.watchEvents.Add(1)
		}
		out <- e
	}()
	return out
}

// Op is one operation of a Multi.
type Op interface{ request(acl []gozk.ACL) any }

// CheckOp fails the Multi unless path exists with version (-1: any).
type CheckOp struct {
	Path    string
	Version int32
}

// CreateOp creates a znode in a Multi.
type CreateOp struct {
	Path string
	Data []byte
	Mode CreateMode
}

// SetOp sets data in a Multi, compare-and-set on Version (-1: any).
type SetOp struct {
	Path    string
	Data    []byte
	Version int32
}

// DeleteOp deletes a znode in a Multi, compare-and-set on Version (-1: any).
type DeleteOp struct {
	Path    string
	Version int32
}

func (o CheckOp) request([]gozk.ACL) any {
	return &gozk.CheckVersionRequest{Path: o.Path, Version: o.Version}
}
func (o CreateOp) request(acl []gozk.ACL) any {
	return &gozk.CreateRequest{Path: o.Path, Data: o.Data, Acl: acl, Flags: int32(o.Mode)}
}
func (o SetOp) request([]gozk.ACL) any {
	return &gozk.SetDataRequest{Path: o.Path, Data: o.Data, Version: o.Version}
}
func (o DeleteOp) request([]gozk.ACL) any {
	return &gozk.DeleteRequest{Path: o.Path, Version: o.Version}
}

// MultiError says which operation of a failed Multi failed.
type MultiError struct {
	Index int
	Err   error
}

func (e *MultiError) Error() string { return fmt.Sprintf("multi op %d: %v", e.Index, e.Err) }
func (e *MultiError) Unwrap() error { return e.Err }

// Multi runs ops atomically: all or none. On failure the error is a
// *MultiError naming the first operation that failed (errors.Is works on it).
func (s *Session) Multi(ctx context.Context, ops ...Op) error {
	reqs := make([]any, len(ops))
	for i, o := range ops {
		reqs[i] = o.request(s.client.acl)
	}
	var resp []gozk.MultiResponse
	err := s.write(ctx, func() (err error) {
		resp, err = s.conn.Multi(reqs...)
		return err
	})
	if err == nil {
		return nil
	}
	if errors.Is(err, ctx.Err()) && ctx.Err() != nil {
		return err
	}
	for i, r := range resp {
		if r.Error != nil && !errors.Is(r.Error, gozk.ErrAPIError) && !errors.Is(r.Error, gozk.ErrUnknown) {
			return &MultiError{Index: i, Err: mapErr(r.Error)}
		}
	}
	return err
}

// Join joins znode path elements.
func Join(elem ...string) string { return path.Join(elem...) }
