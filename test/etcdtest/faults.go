package etcdtest

// Launch starts member i again (after Kill or Stop) without waiting for
// the cluster to serve: for a nemesis that must not fail the test when a
// loaded machine takes long to bring it back (it waits on its own terms).
func (c *Cluster) Launch(i int) {
	c.t.Helper()
	c.launch(c.Members[i])
}
