package etcdtest

import "time"

// StopAll kills every member (SIGKILL), as an outage of the whole
// cluster would; StartAll brings them back with their data.
func (c *Cluster) StopAll() {
	for _, m := range c.Members {
		c.kill(m)
	}
}

// StartAll starts every stopped member and waits until the cluster
// serves (one member alone has no quorum: they start together).
func (c *Cluster) StartAll() {
	c.t.Helper()
	for _, m := range c.Members {
		c.launch(m)
	}
	c.WaitServing(60 * time.Second)
}
