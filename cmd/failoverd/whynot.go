package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
)

// whyWidth is the width status wraps its "Not leading" lines at.
const whyWidth = 100

// notLeadingOf is, for every member that does not lead, why (memberWhy).
func notLeadingOf(ms []cluster.Member) map[string]string {
	var leader *cluster.Member
	for i := range ms {
		if ms[i].State == cluster.StateLeader {
			leader = &ms[i]
		}
	}
	out := map[string]string{}
	for _, m := range ms {
		if why := memberWhy(m, leader); why != "" {
			out[m.NodeID] = why
		}
	}
	return out
}

// memberWhy is why m does not lead ("": it leads): the reason its record
// gives, except that a standby the leader holds out of its candidates
// after a failed handover is held_out (the held node cannot know it; the
// leader's record says until when and why), and a standby still failing
// to fence an earlier leader while another leads is a standby. A record of an earlier
// version, without a reason, gets one from its priority, health and state.
func memberWhy(m cluster.Member, leader *cluster.Member) string {
	if m.State == cluster.StateLeader {
		return ""
	}
	why := m.NotLeading
	if why == "" {
		switch {
		case !m.MayLead():
			why = controller.NotLeadingPriorityZero + ": node.priority is 0: this node never campaigns"
		case m.Health != "healthy":
			why = controller.NotLeadingUnhealthy + ": health " + m.Health
		default:
			why = m.State + ": no reason published (a node of an earlier version)"
		}
	}
	if code(why) == controller.NotLeadingFencingFailed && m.State == string(controller.StateStandby) && leader != nil && leader.NodeID != m.NodeID {
		// A streak of failed fences a node that does not watch the
		// leader could not see end: another node took over since.
		why = fmt.Sprintf("%s: in the election; %s leads (epoch %d)", controller.NotLeadingStandby, leader.NodeID, leader.Epoch)
	}
	if code(why) == controller.NotLeadingStandby && leader != nil && leader.NodeID != m.NodeID {
		if h, ok := leader.HoldOn(m.NodeID); ok {
			return fmt.Sprintf("%s: the leader %s holds it out of its candidates after a failed handover, %s", controller.NotLeadingHeldOut, leader.NodeID, h)
		}
	}
	return why
}

// code is the reason code of a NotLeading text.
func code(why string) string {
	c, _, _ := strings.Cut(why, ":")
	return c
}

// noLeaderWhy says why no member leads ("": one does), from the members'
// reasons (memberWhy) and the pause: a takeover under way or failing
// first, then every member unhealthy, the pause, an election under way,
// and otherwise the reasons grouped by code.
func noLeaderWhy(ms []cluster.Member, pause *cluster.Pause) string {
	if len(ms) == 0 {
		return "no member is running (no member records)"
	}
	whys := make([]string, len(ms))
	for i, m := range ms {
		if m.State == cluster.StateLeader {
			return ""
		}
		whys[i] = memberWhy(m, nil)
	}
	for i, w := range whys {
		switch code(w) {
		case controller.NotLeadingTakingOver:
			return fmt.Sprintf("%s is taking over: %s", ms[i].NodeID, detail(w))
		case controller.NotLeadingFencingFailed:
			return fmt.Sprintf("%s cannot take over: %s", ms[i].NodeID, detail(w))
		}
	}
	var sick []string
	for _, m := range ms {
		if m.Health != "healthy" {
			sick = append(sick, m.NodeID+": "+m.Health)
		}
	}
	if len(sick) == len(ms) {
		return "every member is unhealthy (" + strings.Join(sick, ", ") + ")"
	}
	if pause != nil {
		return "the cluster is paused: no automatic failover until 'failoverd resume' (failover --to still works)"
	}
	var order []string
	groups := map[string][]string{}
	for i, w := range whys {
		c := code(w)
		if c == controller.NotLeadingStandby {
			return "no leader elected yet: " + ms[i].NodeID + " is in the election"
		}
		if groups[c] == nil {
			order = append(order, c)
		}
		groups[c] = append(groups[c], ms[i].NodeID)
	}
	parts := make([]string, 0, len(order))
	for _, c := range order {
		label := c
		if c == controller.NotLeadingPriorityZero {
			label = "priority 0, never leads"
		}
		parts = append(parts, label+": "+strings.Join(groups[c], ", "))
	}
	return "no member may lead (" + strings.Join(parts, "; ") + ")"
}

// detail is a NotLeading text without its code.
func detail(why string) string {
	_, d, _ := strings.Cut(why, ": ")
	return d
}

// printNotLeading prints a "Not leading" line for every member that does
// not lead, in the members' order, wrapped at whyWidth columns.
func printNotLeading(w io.Writer, v clusterView) {
	for _, m := range v.Members {
		if why := v.NotLeading[m.NodeID]; why != "" {
			fmt.Fprint(w, wrap(fmt.Sprintf("Not leading: %s: %s", m.NodeID, why), whyWidth, "    "))
		}
	}
}

// wrap breaks s at spaces into lines of at most width columns (a longer
// word stays whole), the lines after the first indented; every line ends
// in a newline.
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	line := ""
	for _, word := range strings.Split(s, " ") {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) <= width:
			line += " " + word
		default:
			b.WriteString(line + "\n")
			line = indent + word
		}
	}
	b.WriteString(line + "\n")
	return b.String()
}
