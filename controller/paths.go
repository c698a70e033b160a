package controller

import "github.com/failoverd/failoverd/cluster"

// layout is where this controller's cluster lives; package cluster owns
// the paths.
func (c *Controller) layout() cluster.Layout {
	return cluster.Layout{Root: c.cfg.Root, Cluster: c.cfg.Cluster}
}
