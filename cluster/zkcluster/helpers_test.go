package zkcluster

import (
	"context"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

// campaignFair starts id's elector in s (fair mode) and returns its terms as
// they are won; each is held until the test ends or stop is called.
func campaignFair(t *testing.T, s *Store, c *zk.Client, id string) (terms <-chan *wonTerm, stop func()) {
	t.Helper()
	el, err := election.New(election.Config{Dir: s.Layout().ElectionDir(), NodeID: id, Mode: election.Fair}, election.Deps{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	won := make(chan *wonTerm, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Elector(el).Campaign(ctx, func(ctx context.Context, tm cluster.Term) {
			won <- asWon(tm)
			<-ctx.Done()
		})
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return won, stop
}

// nextTerm returns the next term won on ch (campaignFair's).
func nextTerm(t *testing.T, ch <-chan *wonTerm) *wonTerm {
	t.Helper()
	select {
	case tm := <-ch:
		return tm
	case <-time.After(30 * time.Second):
		t.Fatal("not elected")
	}
	return nil
}

// waitQueueLen waits until the election queue holds n candidates, read on adm.
func waitQueueLen(t *testing.T, adm *zk.Session, n int) {
	t.Helper()
	waitFor(t, 20*time.Second, "the election queue", func() bool {
		kids, err := adm.Children(t.Context(), testLayout.ElectionDir())
		return err == nil && len(kids) == n
	})
}

// validErr is the error of t's Expiry (nil: the term can be assumed).
func validErr(t cluster.Term) error {
	_, err := t.Expiry()
	return err
}

// wonTerm is a won term as the tests use it: the controller's Term, with
// the leadership of the backend's term under it.
type wonTerm struct {
	cluster.Term
	l election.Leadership
	s *Store
}

// asWon is tm as a wonTerm.
func asWon(tm cluster.Term) *wonTerm {
	p := cluster.Primitive(tm).(*term)
	return &wonTerm{Term: tm, l: p.l, s: p.s}
}
