package zktest

import (
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// connectThrough connects a client to the server behind p, through p; the
// client closes when the test ends.
func connectThrough(t *testing.T, p *LossProxy) *zk.Conn {
	t.Helper()
	conn, _, err := zk.Connect([]string{p.Addr()}, 4*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// existsAfterCut asks whether path exists until the client, reconnecting
// (same session) after the proxy cut its connection, gets an answer.
func existsAfterCut(t *testing.T, conn *zk.Conn, path string) bool {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, _, err := conn.Exists(path)
		if err == nil {
			return ok
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer after the cut: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A create whose reply the proxy loses was applied by the server, yet the
// client only saw its connection cut.
func TestLossProxyLosesReplyAfterServerApplied(t *testing.T) {
	c := Start(t, 1)
	p := NewLossProxy(t, c.Servers[0].Addr)
	conn := connectThrough(t, p)
	if _, err := conn.Create("/before", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create through the proxy: %v", err)
	}
	p.LoseReplies(1, func(op int32, path string) bool { return op == OpCreate && strings.HasPrefix(path, "/lost") })
	if _, err := conn.Create("/lost", nil, 0, zk.WorldACL(zk.PermAll)); err == nil {
		t.Fatal("create answered although its reply was to be lost")
	}
	if lost := p.Lost(); len(lost) != 1 || lost[0].Path != "/lost" || lost[0].Op != OpCreate {
		t.Fatalf("lost %v", lost)
	}
	// The client reconnects (same session) and finds the znode there.
	if !existsAfterCut(t, conn, "/lost") {
		t.Fatal("the server did not apply the create whose reply was lost")
	}
	// Armed losses are used up: the next create is answered.
	if _, err := conn.Create("/lost2", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create after the loss: %v", err)
	}
}

// A dropped request never reaches the server.
func TestLossProxyDropsRequest(t *testing.T) {
	c := Start(t, 1)
	p := NewLossProxy(t, c.Servers[0].Addr)
	conn := connectThrough(t, p)
	if _, err := conn.Create("/kept", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	p.DropRequests(1, func(op int32, path string) bool { return op == OpDelete && path == "/kept" })
	if err := conn.Delete("/kept", -1); err == nil {
		t.Fatal("delete answered although it was to be dropped")
	}
	if !existsAfterCut(t, conn, "/kept") {
		t.Fatal("the dropped delete reached the server")
	}
	if lost := p.Lost(); len(lost) != 1 || !lost[0].Dropped || lost[0].Op != OpDelete {
		t.Fatalf("lost %v", lost)
	}
}
