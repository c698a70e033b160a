package controller

import "github.com/failoverd/failoverd/cluster"

// layout is where this controller's cluster lives; package cluster owns
// the paths.
func (c *Controller) layout() cluster.Layout {
	return cluster.Layout{Root: c.cfg.Root, Cluster: c.cfg.Cluster}
}

// ElectionDir is where the candidates of a cluster live.
//
// Deprecated: use cluster.Layout.ElectionDir. Kept only for test/bench
// until it moves over (issue 11).
func ElectionDir(root, name string) string {
	return cluster.Layout{Root: root, Cluster: name}.ElectionDir()
}

// MembersDir is where every node publishes its member record.
//
// Deprecated: use cluster.Layout.MembersDir. Kept only for test/bench
// until it moves over (issue 11).
func MembersDir(root, name string) string {
	return cluster.Layout{Root: root, Cluster: name}.MembersDir()
}
