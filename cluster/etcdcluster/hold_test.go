package etcdcluster

import (
	"context"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/etcdtest"
)

// A session that ends at its deadline (no renewal answered) while a term
// on it is held keeps its lease, and with it the term's election entry,
// until the term returned (its demote is over): the Conn revokes it only
// after the hold was released.
func TestEndedLeaseRevokedAfterTheTermReturned(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	proxy, cli := proxiedClient(t, c)
	revoked := make(chan time.Time, 8)
	conn, err := NewConn(cli, ConnConfig{LeaseTTL: 2 * time.Second, Logger: testLogger("a"), onRevoke: func() { revoked <- time.Now() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := conn.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	release := s.Hold()
	proxy.Blackhole(true)
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("the session did not end while its traffic was held")
	}
	ended := time.Now()
	select {
	case at := <-revoked:
		t.Fatalf("the lease was revoked %v after its session ended, while a term on it was held", at.Sub(ended).Round(time.Millisecond))
	case <-time.After(1500 * time.Millisecond):
	}
	released := time.Now()
	release()
	select {
	case at := <-revoked:
		t.Logf("session ended (%v); lease revoked %v after the hold was released", s.Err(), at.Sub(released).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the lease was not revoked within 5s of the hold's release")
	}
}
