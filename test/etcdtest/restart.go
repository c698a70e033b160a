package etcdtest

import "time"

// StartAll starts every member that is not running (after Kill or Stop),
// all at once, and waits until the cluster serves: a cluster stopped
// whole comes back only when a quorum runs, which StartMember, one at a
// time, would wait for in vain.
func (c *Cluster) StartAll() {
	c.t.Helper()
	for _, m := range c.Members {
		c.launch(m)
	}
	c.WaitServing(60 * time.Second)
}
