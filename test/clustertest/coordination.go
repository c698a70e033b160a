package clustertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

// Faults and reads of the coordination service that mean the same on
// both backends, so that a scenario is written once and runs on each
// (ForEachBackend): the service stopped and started, a node cut off from
// it, a record overwritten or deleted behind failoverd's back, as an
// operator's tool (or a bug) could.

// ErrNoRecord is ReadRecord's error for a record that does not exist.
var ErrNoRecord = errors.New("clustertest: no such record")

// Layout is where the cluster's records live (the same on both backends).
func (c *Cluster) Layout() cluster.Layout { return cluster.Layout{Root: "/failoverd", Cluster: "e2e"} }

// SessionTimeout is how long the coordination service keeps a dead
// daemon's session: ZooKeeper's session timeout, etcd's lease TTL.
func (c *Cluster) SessionTimeout() time.Duration {
	if c.Etcd != nil {
		return c.Opts.EtcdLeaseTTL
	}
	return c.Opts.SessionTimeout
}

// BackendName is how failoverd names the coordination service in its
// messages ("zookeeper" or "etcd").
func (c *Cluster) BackendName() string {
	if c.Etcd != nil {
		return BackendEtcd
	}
	return BackendZooKeeper
}

// StopCoordination kills every server of the coordination service (all
// ZooKeeper servers, all etcd members): a whole outage.
func (c *Cluster) StopCoordination() {
	if c.Etcd != nil {
		c.Etcd.StopAll()
		return
	}
	c.ZK.StopAll()
}

// StartCoordination starts the stopped servers again and waits until the
// service serves.
func (c *Cluster) StartCoordination() {
	c.t.Helper()
	if c.Etcd != nil {
		c.Etcd.StartAll()
		return
	}
	c.ZK.StartAll()
}

// CutOff starts (true) or ends (false) a partition between the node's
// failoverd and the coordination service: connections stay open and carry
// nothing. It needs Options.ThroughProxy.
func (n *Node) CutOff(on bool) {
	switch {
	case n.Proxy != nil:
		n.Proxy.Blackhole(on)
	case len(n.EtcdProxies) > 0:
		for _, p := range n.EtcdProxies {
			p.Blackhole(on)
		}
	default:
		n.c.t.Fatalf("CutOff(%s): the cluster was started without ThroughProxy", n.ID)
	}
}

// zkSession opens an unauthenticated ZooKeeper session on the ensemble,
// closed when the test ends.
func (c *Cluster) zkSession(ctx context.Context) (*zk.Session, error) {
	cl, err := zk.NewClient(zk.Config{Servers: c.ZK.Addrs(), SessionTimeout: 4 * time.Second}, zk.Deps{})
	if err != nil {
		return nil, err
	}
	c.t.Cleanup(cl.Close)
	return cl.Session(ctx)
}

// etcdClient is a client of every etcd member, closed when the test ends.
func (c *Cluster) etcdClient() (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	c.t.Cleanup(func() { cli.Close() })
	return cli, nil
}

// ReadRecord reads the record at p (a path of Layout) as it is stored,
// with its version: ZooKeeper's data version, etcd's mod revision; any
// write changes it. ErrNoRecord when there is none.
func (c *Cluster) ReadRecord(ctx context.Context, p string) ([]byte, int64, error) {
	if c.Etcd != nil {
		cli, err := c.etcdClient()
		if err != nil {
			return nil, 0, err
		}
		resp, err := cli.Get(ctx, p)
		if err != nil {
			return nil, 0, err
		}
		if len(resp.Kvs) == 0 {
			return nil, 0, ErrNoRecord
		}
		return resp.Kvs[0].Value, resp.Kvs[0].ModRevision, nil
	}
	sess, err := c.zkSession(ctx)
	if err != nil {
		return nil, 0, err
	}
	b, st, err := sess.Get(ctx, p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, 0, ErrNoRecord
	}
	return b, int64(st.Version), err
}

// WriteRecord overwrites the record at p (a path of Layout) with data,
// unconditionally, as a tool outside failoverd could (with ZooKeeper, an
// unauthenticated session: the record must exist and the cluster run
// without Auth).
func (c *Cluster) WriteRecord(ctx context.Context, p string, data []byte) error {
	if c.Etcd != nil {
		cli, err := c.etcdClient()
		if err != nil {
			return err
		}
		_, err = cli.Put(ctx, p, string(data))
		return err
	}
	sess, err := c.zkSession(ctx)
	if err != nil {
		return err
	}
	_, err = sess.Set(ctx, p, data, -1)
	return err
}

// DeleteElectionRecord deletes n's candidate record in the election (its
// znode or key under Layout().ElectionDir()), as an operator could: n's
// leadership is over, its session lives on.
func (c *Cluster) DeleteElectionRecord(ctx context.Context, n *Node) error {
	dir := c.Layout().ElectionDir()
	mine := func(b []byte) bool {
		var cand struct {
			NodeID string `json:"node_id"`
		}
		return json.Unmarshal(b, &cand) == nil && cand.NodeID == n.ID
	}
	if c.Etcd != nil {
		cli, err := c.etcdClient()
		if err != nil {
			return err
		}
		resp, err := cli.Get(ctx, dir+"/", clientv3.WithPrefix())
		if err != nil {
			return err
		}
		var keys []string
		for _, kv := range resp.Kvs {
			keys = append(keys, string(kv.Key))
			if mine(kv.Value) {
				_, err := cli.Delete(ctx, string(kv.Key))
				return err
			}
		}
		return fmt.Errorf("no election key of %s among %v", n.ID, keys)
	}
	sess, err := c.zkSession(ctx)
	if err != nil {
		return err
	}
	kids, err := sess.Children(ctx, dir)
	if err != nil {
		return err
	}
	for _, k := range kids {
		b, _, err := sess.Get(ctx, path.Join(dir, k))
		if err != nil || !mine(b) {
			continue
		}
		return sess.Delete(ctx, path.Join(dir, k), -1)
	}
	return fmt.Errorf("no election znode of %s among %v", n.ID, kids)
}

// WatchCreated watches the record at p (a path of Layout), which must not
// exist yet: the channel gets the time its creation was seen, or is
// closed without a value when the watch ends otherwise. The watch is in
// place when WatchCreated returns.
func (c *Cluster) WatchCreated(ctx context.Context, p string) (<-chan time.Time, error) {
	created := make(chan time.Time, 1)
	if c.Etcd != nil {
		cli, err := c.etcdClient()
		if err != nil {
			return nil, err
		}
		resp, err := cli.Get(ctx, p)
		if err != nil {
			return nil, err
		}
		if len(resp.Kvs) != 0 {
			return nil, fmt.Errorf("%s exists", p)
		}
		// From the revision after the read: no creation is missed, however
		// late the watch is registered.
		wch := cli.Watch(ctx, p, clientv3.WithRev(resp.Header.Revision+1))
		go func() {
			defer close(created)
			for wr := range wch {
				for _, ev := range wr.Events {
					if ev.IsCreate() {
						created <- time.Now()
						return
					}
				}
				if wr.Err() != nil {
					return
				}
			}
		}()
		return created, nil
	}
	sess, err := c.zkSession(ctx)
	if err != nil {
		return nil, err
	}
	there, _, ch, err := sess.ExistsW(ctx, p)
	if err != nil {
		return nil, err
	}
	if there {
		return nil, fmt.Errorf("%s exists", p)
	}
	go func() {
		defer close(created)
		if ev := <-ch; ev.Type == zk.EventNodeCreated {
			created <- time.Now()
		}
	}()
	return created, nil
}
