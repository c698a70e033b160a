package controller

// Decision is the loop's decision published with the last status: whether
// the node campaigns, the label of the cause it ends a candidacy with (""
// for none) and why it does not lead.
func (c *Controller) Decision() (join bool, cause, why string) {
	v := c.snap.Load().decision
	if v.cause != nil {
		cause = v.cause.label
	}
	return v.join, cause, v.why
}
