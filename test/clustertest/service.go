package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/freeport"
)

// Service is what a cluster runs beside each failoverd: the toy service
// (the default), or an example's real service (test/redistest,
// test/pgtest). The cluster runs the coordination backend and the
// daemons; the service knows how to start, crash and check its own
// processes, and its hooks (named in the configs it writes) promote,
// demote, fence and follow it.
type Service interface {
	// Setup runs before any process starts, with c.Nodes made (ID and
	// Dir) and the backend up: it writes every node's failoverd config
	// (Node.Config, on the backend of c.Coordination) and sets its
	// AdminAddr and ServiceAddr.
	Setup(c *Cluster)
	// Boot starts the services the cluster starts with (every node's,
	// or the first one's only when the others are copied from it).
	Boot(c *Cluster)
	// Start starts n's service (again) as a standby and waits until it
	// answers.
	Start(n *Node)
	// Crash kills n's service (SIGKILL) and waits until it is gone.
	Crash(n *Node)
	// Primary reports whether n's service serves as the primary.
	Primary(n *Node) bool
	// Follows reports whether n's service replicates from leader's.
	Follows(n, leader *Node) bool
	// Env is added to n's failoverd's environment.
	Env(n *Node) []string
	// Logs are n's service logs, for DumpLogs.
	Logs(n *Node) []string
}

// StartService starts the node's service (again) as a standby.
func (n *Node) StartService() { n.c.t.Helper(); n.c.Opts.Service.Start(n) }

// CrashService kills the node's service (SIGKILL) and waits until it is
// gone; its failoverd runs on.
func (n *Node) CrashService() { n.c.Opts.Service.Crash(n) }

// Crash is a host crash: SIGKILL to the node's failoverd, to the hooks it
// was running (each in its own process group, so they outlive a killed
// daemon, and a health check that survived could start the service
// again) and to its service.
func (n *Node) Crash() {
	n.Kill(syscall.SIGKILL)
	for i := 0; i < 2; i++ {
		KillNaming(n.dir)
		n.CrashService()
	}
}

// Cluster returns the cluster the node belongs to.
func (n *Node) Cluster() *Cluster { return n.c }

// T is the test the cluster runs in.
func (c *Cluster) T() testing.TB { return c.t }

// Others are the nodes other than the given ones.
func (c *Cluster) Others(not ...*Node) []*Node {
	var out []*Node
next:
	for _, n := range c.Nodes {
		for _, x := range not {
			if n == x {
				continue next
			}
		}
		out = append(out, n)
	}
	return out
}

// CurrentLeader is the first node that reports state leader and whose
// service serves as the primary, or nil.
func (c *Cluster) CurrentLeader() *Node {
	for _, n := range c.Nodes {
		if s, ok := n.Status(); ok && s.State == controller.StateLeader && c.Opts.Service.Primary(n) {
			return n
		}
	}
	return nil
}

// WaitSettled waits until a node other than not leads with its service
// the primary, and the given nodes' services (every other node's when
// none are given) replicate from it, and returns that leader. It follows
// the leadership if it moves meanwhile (on a loaded host a lease can run
// out).
func (c *Cluster) WaitSettled(not string, timeout time.Duration, nodes ...*Node) *Node {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		l := c.CurrentLeader()
		if l != nil && l.ID != not {
			want := nodes
			if len(want) == 0 {
				want = c.Others(l)
			}
			var pending []string
			for _, n := range want {
				if n != l && !c.Opts.Service.Follows(n, l) {
					pending = append(pending, n.ID)
				}
			}
			if len(pending) == 0 {
				return l
			}
			last = fmt.Sprintf("%s leads; not following it: %s", l.ID, strings.Join(pending, ", "))
		} else {
			last = "no leader"
			if l != nil {
				last = l.ID + " still leads"
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("not settled within %v: %s", timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// EventsSince are the events at or after since.
func (c *Cluster) EventsSince(since time.Time) []Event {
	var out []Event
	for _, e := range c.Events() {
		if !e.At.Before(since) {
			out = append(out, e)
		}
	}
	return out
}

// WaitEvent waits up to timeout for an event of kind at or after since
// matching kv, and returns the first. (A service can show the effect of
// a hook before the hook has written its line, which it does last.)
func (c *Cluster) WaitEvent(kind string, since time.Time, timeout time.Duration, kv ...string) (Event, bool) {
	deadline := time.Now().Add(timeout)
	for {
		if evs := Find(c.EventsSince(since), kind, kv...); len(evs) > 0 {
			return evs[0], true
		}
		if time.Now().After(deadline) {
			return Event{}, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// toyService is the example toy service (examples/toyservice), with the
// harness's own hook scripts (writeScripts) and configs (writeConfig).
type toyService struct{ bin string }

func (s *toyService) Setup(c *Cluster) {
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			c.t.Fatal("curl is required (make deps)")
		}
		c.t.Skip("curl is required (make deps)")
	}
	fd, toy := Binaries(c.t)
	s.bin = toy
	c.writeScripts()
	ports := freeport.Take(c.t, 2*len(c.Nodes))
	var fenceMap strings.Builder
	for i, n := range c.Nodes {
		n.AdminAddr = fmt.Sprintf("127.0.0.1:%d", ports[2*i])
		n.ToyAddr = fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])
		n.ServiceAddr = n.ToyAddr
		n.addProxies()
		fmt.Fprintf(&fenceMap, "%s http://%s\n", n.ID, n.ToyAddr)
	}
	must(c.t, os.WriteFile(filepath.Join(c.Dir, "toys.map"), []byte(fenceMap.String()), 0o644))
	for _, n := range c.Nodes {
		n.writeConfig(fd)
	}
}

func (s *toyService) Boot(c *Cluster) {
	for _, n := range c.Nodes {
		n.startToy(s.bin)
	}
	for _, n := range c.Nodes {
		n.waitToy()
	}
}

func (s *toyService) Start(n *Node) { n.ReviveToy() }

func (s *toyService) Crash(n *Node) {
	n.stopToy()
	if n.toyDone != nil {
		select {
		case <-n.toyDone:
		case <-time.After(30 * time.Second):
		}
	}
}

// Primary: the toy's tests read its role themselves (Node.Role); a
// leader counts as soon as its failoverd reports it.
func (s *toyService) Primary(n *Node) bool { return true }

// Follows: the toy does not replicate (its follow hook only records).
func (s *toyService) Follows(n, leader *Node) bool { return true }

func (s *toyService) Env(n *Node) []string { return []string{"TOY=http://" + n.ToyAddr} }

func (s *toyService) Logs(n *Node) []string { return []string{filepath.Join(n.dir, "toy.log")} }
