package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/failoverd/failoverd/cluster"
)

// Lease timing defaults.
const (
	// DefaultLeaseTTL is the lease TTL a Conn asks for when none is
	// configured: etcd's maintainers call 5s a good lower bound.
	DefaultLeaseTTL = 5 * time.Second
	// RateDiv: the clock rates of this host and of the etcd leader are
	// assumed within 1/RateDiv of each other; the deadline keeps TTL/RateDiv
	// free for it (the margin).
	RateDiv = 20
	// MinTolerance is the least the lease must leave beyond the renew
	// interval and the demote budget (round trips, scheduling): below it a
	// leader would lose its term on every slow renewal.
	MinTolerance = 100 * time.Millisecond
	// MaxRenewInterval caps the default renew interval (DefaultRenewInterval):
	// a leader renews at least every second, so that after an etcd
	// leader's death its newest confirmed renewal is at most that old
	// when the next etcd leader is elected.
	MaxRenewInterval = time.Second
	// EtcdElection is how long an etcd cluster may take to elect a new
	// leader after its leader died (no renewal can be confirmed
	// meanwhile): etcd 3.4 at its default 1s election timeout took
	// 1.0-1.7s. CheckTiming warns of a lease that leaves less after one
	// renewal went unanswered.
	EtcdElection = 2 * time.Second
	// retryInterval paces renewals after a failed one.
	retryInterval = 200 * time.Millisecond
	// hedgeAfter is how long a renewal may stay unanswered before another
	// is sent beside it, and maxInFlight how many may be in flight (keep).
	hedgeAfter  = 500 * time.Millisecond
	maxInFlight = 8
	// DefaultReadKey is the key a Conn reads to confirm its renewals when
	// ConnConfig.ReadKey is empty.
	DefaultReadKey = "/failoverd/"
)

// ConnConfig sets a Conn's lease timing.
type ConnConfig struct {
	// LeaseTTL is the TTL asked for each session's lease, rounded up to
	// whole seconds (0: DefaultLeaseTTL). etcd may grant a longer one (it
	// raises TTLs below 1.5 election timeouts); the granted one counts.
	LeaseTTL time.Duration
	// RenewInterval is how often the lease is renewed (0:
	// DefaultRenewInterval of the granted TTL).
	RenewInterval time.Duration
	// ReadKey is the key of the linearizable read that confirms each
	// renewal (see keep): any key the client's etcd user may read, there
	// or not; only its count is read (empty: DefaultReadKey). A daemon
	// names a key of its cluster.
	ReadKey string
	// WarnVersions makes the Conn ask each endpoint's server for its
	// version once its first session began, and log PreVoteWarning where
	// it applies (a daemon sets it; a command line tool need not).
	WarnVersions bool
	Logger       *slog.Logger // nil: discard

	// onRenewed, set by tests only, runs after a renewal's answer was
	// recorded; onRevoke right before an ended session's lease is revoked.
	onRenewed func()
	onRevoke  func()
}

// Conn keeps a daemon's sessions with etcd over one client: a session is
// one lease, granted by the Conn and renewed by it until the lease is
// lost; then the next session begins with a new lease. The election
// entries, member records and failover requests of a session are bound
// to its lease and go with it. Safe for concurrent use.
type Conn struct {
	cli     *clientv3.Client
	ttl     int64 // seconds asked for
	renew   time.Duration
	readKey string
	warnVer bool // ConnConfig.WarnVersions
	log     *slog.Logger

	onRenewed func() // ConnConfig.onRenewed
	onRevoke  func() // ConnConfig.onRevoke

	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	done   chan struct{}  // closed when run returned
	bg     sync.WaitGroup // warnVersions

	mu      sync.Mutex
	cur     *Session      // the live session (nil: none yet, or between two)
	changed chan struct{} // closed when a session begins, then replaced
}

// NewConn starts keeping sessions on cli; Close stops it (the caller
// closes cli afterwards).
func NewConn(cli *clientv3.Client, cfg ConnConfig) (*Conn, error) {
	if cli == nil {
		return nil, errors.New("etcdcluster: a client is required")
	}
	if cfg.LeaseTTL < 0 || cfg.RenewInterval < 0 {
		return nil, errors.New("etcdcluster: negative lease TTL or renew interval")
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ReadKey == "" {
		cfg.ReadKey = DefaultReadKey
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		cli: cli, ttl: int64((cfg.LeaseTTL + time.Second - 1) / time.Second), renew: cfg.RenewInterval, readKey: cfg.ReadKey, warnVer: cfg.WarnVersions,
		log: cfg.Logger.With("component", "etcdcluster"), onRenewed: cfg.onRenewed, onRevoke: cfg.onRevoke,
		ctx: ctx, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{}),
	}
	go c.run()
	return c, nil
}

// Client is the etcd client the Conn uses.
func (c *Conn) Client() *clientv3.Client { return c.cli }

// Close ends the current session (revoking its lease, so that its keys
// go at once) and stops keeping sessions.
func (c *Conn) Close() {
	c.cancel()
	<-c.done
	c.bg.Wait()
}

// Session is one lease of a Conn, from its grant until it is lost.
type Session struct {
	ID    clientv3.LeaseID
	done  chan struct{}
	renew time.Duration // the configured interval (0: DefaultRenewInterval)

	mu     sync.Mutex
	err    error         // why it ended (set before done closes)
	anchor time.Time     // send time of the grant or of the newest confirmed renewal
	ttl    time.Duration // the TTL etcd granted in that answer
	ok     bool          // the newest attempt was answered and confirmed
	// holds counts the terms of this session still held (Hold); drained
	// is closed when it drops to 0 (nil while it is 0).
	holds   int
	drained chan struct{}
	// beat is closed when a renewal counted (moved the anchor), then
	// replaced: heartbeats (Elector.beat) follow the renewals.
	beat chan struct{}
}

// Hold marks a term of this session as held until release is called
// (once its won callback returned): the Conn revokes an ended session's
// lease, which deletes its election entry, only after every hold was
// released, so that the entry stays until the term's demote is over, as
// the contract says (cluster.Elector).
func (s *Session) Hold() (release func()) {
	s.mu.Lock()
	if s.holds == 0 {
		s.drained = make(chan struct{})
	}
	s.holds++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.holds--; s.holds == 0 {
				close(s.drained)
				s.drained = nil
			}
		})
	}
}

// waitHolds waits until no term of s is held, at most d.
func (s *Session) waitHolds(d time.Duration) {
	s.mu.Lock()
	ch := s.drained
	s.mu.Unlock()
	if ch == nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// Done is closed when the session is over.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is why the session ended (nil while it lives): an error wrapping
// cluster.ErrSessionExpired (etcd no longer has the lease) or
// cluster.ErrLeaseExpired (no renewal was answered in time).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// TTL is the lease TTL etcd granted.
func (s *Session) TTL() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ttl
}

// Deadline is the instant, on this host's monotonic clock, before which
// etcd cannot expire the lease (see the package doc): the send time of
// the grant or of the newest confirmed renewal (renewOnce), plus the TTL
// etcd answered, less TTL/RateDiv for the clock rates.
func (s *Session) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return deadline(s.anchor, s.ttl)
}

func deadline(anchor time.Time, ttl time.Duration) time.Time {
	return anchor.Add(ttl - ttl/RateDiv)
}

// RenewInterval is how often the lease is renewed.
func (s *Session) RenewInterval() time.Duration {
	if s.renew > 0 {
		return s.renew
	}
	return DefaultRenewInterval(s.TTL())
}

// DefaultRenewInterval is the renew interval of a lease of TTL ttl: a
// third of it (etcd's own client renews every third), at most
// MaxRenewInterval. An etcd leader's death stops confirmed renewals for
// an etcd election; what the lease must hold beyond it is the age of the
// newest confirmed renewal at that instant (up to a renew interval) and
// the demote budget, so a shorter interval lets a shorter lease ride an
// etcd election out. Each renewal costs three requests (renewOnce).
func DefaultRenewInterval(ttl time.Duration) time.Duration {
	return min(ttl/3, MaxRenewInterval)
}

// untilRenewal is how long until the next renewal is due: a renew
// interval after the send time of the grant or the newest counted
// renewal.
// It is due at once when that send is older, as after a grant that etcd
// answered late (it was waiting for a quorum): a timer started at the
// answer would renew only after the deadline.
func (s *Session) untilRenewal() time.Duration {
	s.mu.Lock()
	anchor := s.anchor
	s.mu.Unlock()
	return time.Until(anchor.Add(s.RenewInterval()))
}

// renewed records a counted renewal (or the grant) sent at sent.
func (s *Session) renewed(sent time.Time, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sent.After(s.anchor) {
		s.anchor, s.ttl = sent, ttl
		if s.beat != nil {
			close(s.beat)
		}
		s.beat = make(chan struct{})
	}
	s.ok = true
}

// renewals returns a channel closed when the next renewal counts.
func (s *Session) renewals() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.beat == nil {
		s.beat = make(chan struct{})
	}
	return s.beat
}

func (s *Session) failed() {
	s.mu.Lock()
	s.ok = false
	s.mu.Unlock()
}

// end ends the session with err (once).
func (s *Session) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.err = err
	close(s.done)
}

// Current returns the live session (nil: none now).
func (c *Conn) Current() *Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil || c.cur.Err() != nil {
		return nil
	}
	return c.cur
}

// Session returns the live session, waiting for one within ctx.
func (c *Conn) Session(ctx context.Context) (*Session, error) {
	for {
		c.mu.Lock()
		s, changed := c.cur, c.changed
		c.mu.Unlock()
		if s != nil && s.Err() == nil {
			return s, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("no etcd session: %w", ctx.Err())
		case <-c.ctx.Done():
			return nil, errors.New("no etcd session: the connection is closed")
		}
	}
}

// SessionChanged returns a channel closed when the next session begins
// (the first one included, if none began yet).
func (c *Conn) SessionChanged() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// Connected reports, without I/O, whether the client's connection is up
// and there is a live session whose newest renewal (or grant) was
// answered and confirmed: this means "in touch with a quorum" as of that
// answer.
func (c *Conn) Connected() bool {
	s := c.Current()
	if s == nil || c.cli.ActiveConnection().GetState() != connectivity.Ready {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ok && time.Now().Before(deadline(s.anchor, s.ttl))
}

// run grants a lease, keeps it, and grants the next one when it is lost,
// until Close.
func (c *Conn) run() {
	defer close(c.done)
	backoff := 100 * time.Millisecond
	for c.ctx.Err() == nil {
		s, err := c.grant()
		if err != nil {
			if c.ctx.Err() == nil {
				c.log.Warn("granting an etcd lease failed", "err", err)
			}
			cluster.Sleep(c.ctx, backoff)
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		c.mu.Lock()
		c.cur = s
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
		c.log.Info("etcd session began", "lease", fmt.Sprintf("%x", int64(s.ID)), "ttl", s.TTL().String(),
			"renew_every", s.RenewInterval().String())
		if c.warnVer {
			c.warnVer = false // once: the first session
			c.bg.Go(c.warnVersions)
		}
		c.keep(s)
		err = s.Err()
		if err == nil { // Close
			s.end(fmt.Errorf("%w: the etcd connection was closed", cluster.ErrSessionExpired))
		} else {
			// lease_left > 0 with "is gone": etcd dropped a lease we had
			// renewed (revoked), not one we failed to renew.
			c.log.Warn("etcd session ended", "lease", fmt.Sprintf("%x", int64(s.ID)),
				"lease_left", time.Until(s.Deadline()).Round(time.Millisecond).String(), "err", err)
		}
		c.mu.Lock()
		c.cur = nil
		c.mu.Unlock()
		// Whatever of it may survive on the server (a lease we stopped
		// trusting) goes now rather than after its TTL, when etcd is
		// reachable: its election entry would keep others waiting. Not
		// before the terms held on it returned (their demote is over):
		// at most a TTL, after which etcd has expired it anyway.
		switch {
		case errors.Is(err, cluster.ErrSessionExpired):
		case c.ctx.Err() != nil:
			s.waitHolds(s.TTL())
			c.revoke(s.ID) // before the caller closes the client
		default:
			go func() {
				s.waitHolds(s.TTL())
				c.revoke(s.ID)
			}()
		}
	}
}

// grant asks etcd for a new lease; its send time is the session's first
// anchor (etcd's leader starts the lease's TTL when it applies the grant).
func (c *Conn) grant() (*Session, error) {
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(c.ctx), time.Duration(c.ttl)*time.Second)
	defer cancel()
	sent := time.Now()
	resp, err := c.cli.Grant(ctx, c.ttl)
	if err != nil {
		return nil, err
	}
	s := &Session{ID: resp.ID, done: make(chan struct{}), renew: c.renew}
	s.renewed(sent, time.Duration(resp.TTL)*time.Second)
	return s, nil
}

// keep renews s a renew interval after the send time of its newest
// counted grant or renewal until etcd says the lease is gone, the
// deadline passes without a counted renewal, or the Conn closes. A
// renewal counts only when confirmed (renewOnce). After a failed renewal
// the next goes retryInterval later; a renewal still unanswered after
// hedgeAfter (or twice as long as the last counted one took) gets another
// beside it, up to maxInFlight (none is given up early: on a slow link
// each takes long, and only the first to finish counts). An
// attempt can hang for its whole limit (a keepalive a follower forwards
// to an etcd leader that died or is cut off), while one sent once the
// next etcd leader is elected is answered at once. Sending more renewals
// never moves the deadline past etcd's expiry: each counts only from its
// own send time, once confirmed, and the deadline only moves forward
// (docs/safety.md, "When renewals are sent").
func (c *Conn) keep(s *Session) {
	ctx, cancel := context.WithCancel(c.ctx)
	var attempts sync.WaitGroup
	defer attempts.Wait()
	defer cancel()
	type result struct {
		id   int
		err  error
		took time.Duration
	}
	results := make(chan result)
	live := map[int]context.CancelFunc{} // attempts in flight, by id
	nextID := 0
	hedge := hedgeAfter // at least twice the time the last counted renewal took
	t := time.NewTimer(s.untilRenewal())
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-s.Done(): // abandoned
			return
		case r := <-results:
			if stop, ok := live[r.id]; ok {
				stop()
				delete(live, r.id)
			}
			err := r.err
			switch {
			case err == nil:
				hedge = max(hedgeAfter, 2*r.took)
				if c.onRenewed != nil {
					c.onRenewed()
				}
				t.Reset(s.untilRenewal())
			case errors.Is(err, errLeaseGone):
				s.end(fmt.Errorf("%w: etcd lease %x is gone", cluster.ErrSessionExpired, int64(s.ID)))
				return
			case c.ctx.Err() != nil:
				return
			case len(live) == 0:
				s.failed()
				c.log.Debug("renewing the etcd lease failed", "lease", fmt.Sprintf("%x", int64(s.ID)), "err", err)
				t.Reset(min(retryInterval, time.Until(s.Deadline())))
			default:
				c.log.Debug("renewing the etcd lease failed", "lease", fmt.Sprintf("%x", int64(s.ID)), "err", err)
			}
			continue
		case <-t.C:
		}
		if !time.Now().Before(s.Deadline()) {
			s.end(fmt.Errorf("%w: no renewal of etcd lease %x was answered within its TTL", cluster.ErrLeaseExpired, int64(s.ID)))
			return
		}
		if len(live) >= maxInFlight { // each ends by its own limit
			t.Reset(min(hedge, time.Until(s.Deadline())))
			continue
		}
		id := nextID
		nextID++
		actx, stop := context.WithCancel(ctx)
		live[id] = stop
		// The limits of an attempt scale with the lease, not with the
		// (capped) interval: a slow link still renews.
		step := max(s.RenewInterval(), s.TTL()/3)
		attempts.Go(func() {
			sent := time.Now()
			err := c.renewOnce(actx, s, step)
			select {
			case results <- result{id, err, time.Since(sent)}:
			case <-ctx.Done():
			}
		})
		t.Reset(min(hedge, time.Until(s.Deadline())))
	}
}

// errLeaseGone: etcd answered a keepalive that the lease is gone.
var errLeaseGone = errors.New("the lease is gone")

// renewOnce renews s once and, when the renewal is confirmed, records it:
// two keepalives on one stream (so both go to the same member), then,
// after the second one's answer, a linearizable read of the Conn's read
// key. The renewal counts from the second keepalive's send time only when
// both keepalive answers and the read's answer carry the same raft term
// (confirm; the package doc has the argument): an etcd leader cut off
// from its quorum renews leases locally until it steps down, and only
// the read tells that it no longer leads. Each keepalive pair may take
// two steps, the read one, none past the deadline. It returns nil
// (counted), an error wrapping errLeaseGone (etcd has no such lease), or
// why the renewal does not count.
func (c *Conn) renewOnce(ctx context.Context, s *Session, step time.Duration) error {
	ctx, cancel := context.WithDeadline(clientv3.WithRequireLeader(ctx), s.Deadline())
	defer cancel()
	first, second, sent, err := c.keepAlivePair(ctx, s.ID, 2*step)
	if err != nil {
		return err
	}
	rctx, rcancel := context.WithTimeout(ctx, step)
	read, err := c.cli.Get(rctx, c.readKey, clientv3.WithCountOnly())
	rcancel()
	if err != nil {
		return fmt.Errorf("the read confirming a renewal failed: %w", err)
	}
	if err := confirm(first.Header, second.Header, read.Header); err != nil {
		return err
	}
	s.renewed(sent, time.Duration(second.TTL)*time.Second)
	return nil
}

// keepAlivePair sends two keepalives of lease id on one stream, the
// second after the first one's answer, within limit, and returns both
// answers and the second one's send time.
func (c *Conn) keepAlivePair(ctx context.Context, id clientv3.LeaseID, limit time.Duration) (first, second *pb.LeaseKeepAliveResponse, sent time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	stream, err := pb.NewLeaseClient(c.cli.ActiveConnection()).LeaseKeepAlive(ctx, grpc.WaitForReady(true))
	if err != nil {
		return nil, nil, time.Time{}, rpctypes.Error(err)
	}
	defer stream.CloseSend()
	ask := func() (*pb.LeaseKeepAliveResponse, error) {
		if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
			return nil, rpctypes.Error(err)
		}
		resp, err := stream.Recv()
		switch err := rpctypes.Error(err); {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return nil, fmt.Errorf("%w: %w", errLeaseGone, err)
		case err != nil:
			return nil, err
		case resp.TTL <= 0:
			return nil, errLeaseGone
		}
		return resp, nil
	}
	if first, err = ask(); err != nil {
		return nil, nil, time.Time{}, err
	}
	sent = time.Now()
	if second, err = ask(); err != nil {
		return nil, nil, time.Time{}, err
	}
	return first, second, sent, nil
}

// errUnconfirmed: a renewal's answers do not show that the member that
// renewed the lease was the etcd leader after the renewal.
var errUnconfirmed = errors.New("renewal not confirmed")

// confirm checks the headers of a renewal's two keepalive answers (one
// stream: one member) and of the linearizable read sent after the second
// answer arrived: the renewal counts only when all three carry the same
// raft term (etcd fills in the term of the newest entry the answering
// member applied). Then the member that answered the second keepalive had
// applied an entry of that term before it got it, so the lessor that
// renewed was that term's leader's (or a later one's); and the read, whose
// member had applied no newer term, was confirmed by that term's leader
// and a quorum after it was sent, so no later leader was elected before
// then (the package doc has every step).
func confirm(first, second, read *pb.ResponseHeader) error {
	switch {
	case first == nil || second == nil || read == nil:
		return fmt.Errorf("%w: an answer without a header", errUnconfirmed)
	case first.MemberId != second.MemberId:
		return fmt.Errorf("%w: the keepalives were answered by members %x and %x", errUnconfirmed, first.MemberId, second.MemberId)
	case first.RaftTerm == 0 || first.RaftTerm != second.RaftTerm || second.RaftTerm != read.RaftTerm:
		return fmt.Errorf("%w: raft terms %d and %d in the keepalive answers, %d in the read's",
			errUnconfirmed, first.RaftTerm, second.RaftTerm, read.RaftTerm)
	}
	return nil
}

// check renews s once, now, to learn whether etcd still has its lease:
// when it has not, s ends (cluster.ErrSessionExpired) and check returns
// its error; otherwise (renewed, or no confirmed answer within a few
// seconds) nil.
func (c *Conn) check(s *Session) error {
	if err := c.renewOnce(c.ctx, s, time.Second); errors.Is(err, errLeaseGone) {
		s.end(fmt.Errorf("%w: etcd lease %x is gone", cluster.ErrSessionExpired, int64(s.ID)))
		return s.Err()
	}
	return nil
}

// abandon gives s up: it is no longer renewed, and the next session
// begins.
func (c *Conn) abandon(s *Session) {
	s.end(fmt.Errorf("%w: etcd lease %x given up (its election key could not be deleted)", cluster.ErrLeaseExpired, int64(s.ID)))
}

// revoke revokes lease id, best effort, within a few seconds.
func (c *Conn) revoke(id clientv3.LeaseID) {
	if c.onRevoke != nil {
		c.onRevoke()
	}
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(context.Background()), 2*time.Second)
	defer cancel()
	if _, err := c.cli.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		c.log.Debug("revoking an ended etcd lease failed; it expires by itself", "lease", fmt.Sprintf("%x", int64(id)), "err", err)
	}
}
