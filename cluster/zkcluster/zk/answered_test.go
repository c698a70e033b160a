package zk

import (
	"fmt"
	"testing"
	"time"
)

// answered says whether a write's outcome came from the ZooKeeper leader's
// pipeline. ErrNoAuth does not: a server with eager ACL checks refuses the
// write itself, without forwarding it, so a follower cut off from its
// leader could answer it.
func TestAnsweredOnlyByTheLeadersPipeline(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, true},
		{ErrNoNode, true},
		{ErrNodeExists, true},
		{ErrBadVersion, true},
		{ErrNotEmpty, true},
		{&MultiError{Index: 0, Err: ErrNoNode}, true},
		{ErrNoAuth, false},
		{fmt.Errorf("%w: x", ErrConnectionLoss), false},
		{ErrSessionExpired, false},
	} {
		if got := answered(tc.err); got != tc.want {
			t.Errorf("answered(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// The ring keeps the newest ackRing answered writes, oldest first.
func TestAckRing(t *testing.T) {
	s := &Session{}
	t0 := time.Now()
	for i := range ackRing + 5 {
		s.recordAck(Ack{Sent: t0.Add(time.Duration(i)), Conn: 1})
	}
	acks := s.Acks()
	if len(acks) != ackRing || acks[0].Sent != t0.Add(5) || acks[ackRing-1].Sent != t0.Add(ackRing+4) {
		t.Errorf("ring: %d acks, first %v, last %v", len(acks), acks[0].Sent.Sub(t0), acks[len(acks)-1].Sent.Sub(t0))
	}
}
