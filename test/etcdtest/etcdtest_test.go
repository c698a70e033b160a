package etcdtest_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/test/etcdtest"
)

// The release server the tests run is the one scripts/etcd-server pins.
func TestReleaseVersionPinned(t *testing.T) {
	b, err := os.ReadFile("../../scripts/etcd-server/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^require go\.etcd\.io/etcd/server/v3 (v\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("scripts/etcd-server/go.mod requires no go.etcd.io/etcd/server/v3")
	}
	if string(m[1]) != etcdtest.ReleaseVersion {
		t.Errorf("scripts/etcd-server pins %s, etcdtest.ReleaseVersion is %s", m[1], etcdtest.ReleaseVersion)
	}
}

// Every server line present reports the version the tests claim to run.
func TestServerVersions(t *testing.T) {
	for _, s := range etcdtest.Servers(t) {
		v, err := s.Version()
		if err != nil {
			t.Fatalf("%s (%s): %v", s.Name, s.Path, err)
		}
		t.Logf("%s: etcd %s (%s)", s.Name, v, s.Path)
		if s.Name == "release" && "v"+v != etcdtest.ReleaseVersion {
			t.Errorf("release server at %s is etcd %s, want %s", s.Path, v, etcdtest.ReleaseVersion)
		}
	}
}

func get(cli *clientv3.Client, key string, d time.Duration, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return cli.Get(ctx, key, opts...)
}

// Isolate cuts a member off from its peers, both ways, while its client
// port stays up: it still answers serializable reads from its own copy,
// but no linearizable read (that needs its leader), and misses a write
// the others make; after Heal it serves again and has the write. Cutting
// the etcd leader this way makes the others elect a new one.
func TestIsolateMember(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	leader := c.Leader()
	for _, victim := range []int{(leader + 1) % 3, leader} {
		other := (victim + 1) % 3
		if other == victim {
			t.Fatal("bad index")
		}
		key := "/isolate/" + c.Members[victim].Name
		c.Isolate(victim)
		// A write proposed to an isolated leader is lost with it: the
		// majority answers once it elected another.
		for deadline := time.Now().Add(30 * time.Second); ; {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := c.Client(other).Put(ctx, key, "written while cut off")
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("put on %s while %s is cut off: %v", c.Members[other].Name, c.Members[victim].Name, err)
			}
		}
		if r, err := get(c.Client(victim), key, 5*time.Second, clientv3.WithSerializable()); err != nil || len(r.Kvs) != 0 {
			t.Errorf("serializable read on the isolated member: %v, %d keys; want an answer from its own copy, without the write", err, kvs(r))
		}
		if _, err := get(c.Client(victim), key, 3*time.Second); err == nil {
			t.Errorf("linearizable read on the isolated member %s succeeded; it must need its leader", c.Members[victim].Name)
		}
		if victim == leader {
			deadline := time.Now().Add(20 * time.Second)
			for {
				l := c.LeaderOf(other)
				if l >= 0 && l != victim {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the majority still follows the isolated leader %s", c.Members[victim].Name)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		c.Heal(victim)
		deadline := time.Now().Add(20 * time.Second)
		for {
			r, err := get(c.Client(victim), key, 3*time.Second)
			if err == nil && len(r.Kvs) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("member %s does not serve the write after Heal: %v", c.Members[victim].Name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// Pause freezes a member (its clients' requests hang), Resume continues
// it; Kill and StartMember bring a member back with its data.
func TestPauseAndKill(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	i := (c.Leader() + 1) % 3
	if _, err := c.Client(0).Put(context.Background(), "/k", "v"); err != nil {
		t.Fatal(err)
	}
	c.Pause(i)
	if _, err := get(c.Client(i), "/k", time.Second, clientv3.WithSerializable()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("read on a paused member: %v, want a timeout", err)
	}
	c.Resume(i)
	// Linearizable: the Put was committed by the other two, and the
	// paused member may not have applied it yet; a serializable read
	// would see its own state.
	if r, err := get(c.Client(i), "/k", 10*time.Second); err != nil || len(r.Kvs) != 1 {
		t.Errorf("read after Resume: %v (%d keys)", err, kvs(r))
	}
	c.Kill(i)
	if c.Running(i) {
		t.Fatal("Running after Kill")
	}
	c.StartMember(i)
	if r, err := get(c.Client(i), "/k", 10*time.Second); err != nil || len(r.Kvs) != 1 {
		t.Errorf("read after a restart: %v", err)
	}
}

// kvs is how many keys r holds (0: none, or no response).
func kvs(r *clientv3.GetResponse) int {
	if r == nil {
		return 0
	}
	return len(r.Kvs)
}
