package zk

import "testing"

// TestHostListRounds: every server in turn; go-zookeeper pauses (retryStart)
// only once a whole round went by without a connection.
func TestHostListRounds(t *testing.T) {
	var h hostList
	if err := h.Init(nil); err == nil {
		t.Error("Init accepted an empty list")
	}
	if err := h.Init([]string{"a:1", "b:2", "c:3"}); err != nil {
		t.Fatal(err)
	}
	type step struct {
		server string
		retry  bool
	}
	next := func(want ...step) {
		t.Helper()
		for _, w := range want {
			s, r := h.Next()
			if s != w.server || r != w.retry {
				t.Fatalf("Next() = %s, %v; want %s, %v", s, r, w.server, w.retry)
			}
		}
	}
	next(step{"a:1", false}, step{"b:2", false}, step{"c:3", false}, step{"a:1", true}, step{"b:2", false})
	h.Connected() // to b
	next(step{"c:3", false}, step{"a:1", false}, step{"b:2", true})
	h.Connected() // to b again; with one server, every reconnect pauses
	var one hostList
	one.Init([]string{"x:1"})
	s, r := one.Next()
	if s != "x:1" || r {
		t.Fatalf("first Next = %s, %v", s, r)
	}
	one.Connected()
	if s, r := one.Next(); s != "x:1" || !r {
		t.Fatalf("Next after a connection = %s, %v; want x:1, true", s, r)
	}
}
