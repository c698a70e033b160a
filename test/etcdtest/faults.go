package etcdtest

import (
	"context"
	"time"
)

// Launch starts member i again (after Kill or Stop) without waiting for
// the cluster to serve: for a nemesis that must not fail the test when a
// loaded machine takes long to bring it back (it waits on its own terms).
func (c *Cluster) Launch(i int) {
	c.t.Helper()
	c.launch(c.Members[i])
}

// MoveLeader makes member to the etcd leader (etcd's leadership
// transfer, asked of the current leader) and returns once it leads. It
// fails the test when to does not lead within 30s.
func (c *Cluster) MoveLeader(to int) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l := c.Leader()
		if l == to {
			return
		}
		var err error
		if st, serr := c.status(to, time.Second); serr != nil {
			err = serr
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = c.Client(l).MoveLeader(ctx, st.Header.MemberId)
			cancel()
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("etcdtest: %s does not lead 30s after asking %s to hand over: %v", c.Members[to].Name, c.Members[l].Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
