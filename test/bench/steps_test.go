package bench

// The pieces of a graceful handoff, timed one by one in this process against
// a real ZooKeeper on loopback: every ZooKeeper request on the critical path,
// the watch delivery, and running a hook. They bound what the end-to-end
// graceful handoff can reach on this machine.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	fdcluster "github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/internal/proc"
	"github.com/failoverd/failoverd/test/zktest"
)

const scSteps = "handoff steps (in-process)"

// BenchmarkHandoffSteps times, BENCH_STEPS_RUNS times each (default 200):
//   - the ZooKeeper requests of a graceful handoff, in the order the old and
//     the new leader issue them (see controller.onElected, election.waitTurn);
//   - the delivery of a NodeDeleted watch to another session;
//   - proc.Run of a trivial bash hook (the benchmark's promote hook) and of
//     /bin/true: its start latency (until the script reads the clock) and
//     its whole run.
func BenchmarkHandoffSteps(b *testing.B) {
	zks := zktest.Start(b, 1)
	n := runs("STEPS", 200)
	ctx := context.Background()
	open := func() *zk.Session {
		c, err := zk.NewClient(zk.Config{Servers: zks.Addrs(), SessionTimeout: 2 * time.Second}, zk.Deps{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		s, err := c.Session(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	s, watcher := open(), open()
	dir := "/steps/e2e"
	elDir := dir + "/election"
	if err := s.EnsurePath(ctx, elDir); err != nil {
		b.Fatal(err)
	}
	if err := s.EnsurePath(ctx, dir+"/members"); err != nil {
		b.Fatal(err)
	}
	me, _, err := s.Create(ctx, elDir+"/c_x-n_", []byte(`{"node_id":"a"}`), zk.EphemeralSequential)
	if err != nil {
		b.Fatal(err)
	}
	member := dir + "/members/a"
	if _, _, err := s.Create(ctx, member, []byte(`{}`), zk.Ephemeral); err != nil {
		b.Fatal(err)
	}
	bc := fdcluster.Layout{Root: "/steps", Cluster: "e2e"}.Breadcrumb()
	rec, err := breadcrumb.Encode(breadcrumb.Record{NodeID: "a", Host: "127.0.0.1", AdminURL: "http://127.0.0.1:1", Epoch: 1, Since: time.Now().UTC()})
	if err != nil {
		b.Fatal(err)
	}
	status := []byte(strings.Repeat("x", 300)) // a member status is ~300 bytes of JSON

	type step struct {
		name string
		run  func() (time.Duration, error)
	}
	timed := func(f func() error) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			t0 := time.Now()
			err := f()
			return time.Since(t0), err
		}
	}
	steps := []step{
		{"zk: set member status (write)", timed(func() error { _, err := s.Set(ctx, member, status, -1); return err })},
		// A term's read of the breadcrumb: a Get, decoded when there is one.
		{"zk: breadcrumb read, absent (Get)", timed(func() error {
			data, _, err := s.Get(ctx, bc)
			if errors.Is(err, zk.ErrNoNode) {
				return nil
			}
			if err != nil {
				return err
			}
			_, err = breadcrumb.Decode(data)
			return err
		})},
		// A term's breadcrumb write and its Finish's delete, each a multi
		// whose first op checks the term's election znode (Finish deletes
		// that znode too; here it stays, to be checked again next run).
		{"zk: breadcrumb write + delete (2 multi writes)", timed(func() error {
			check := zk.CheckOp{Path: me, Version: -1}
			if err := s.Multi(ctx, check, zk.CreateOp{Path: bc, Data: rec, Mode: zk.Persistent}); err != nil {
				return err
			}
			return s.Multi(ctx, check, zk.DeleteOp{Path: bc, Version: 0})
		})},
		{"zk: join + leave (create seq + exists, delete)", timed(func() error {
			p, _, err := s.Create(ctx, elDir+"/c_y-n_", nil, zk.EphemeralSequential)
			if err != nil {
				return err
			}
			return s.Delete(ctx, p, -1)
		})},
		{"zk: children of the election dir", timed(func() error { _, err := s.Children(ctx, elDir); return err })},
		{"zk: exists", timed(func() error { _, _, err := s.Exists(ctx, me); return err })},
		{"zk: watch delivery (delete → other session's event)", func() (time.Duration, error) {
			p, _, err := s.Create(ctx, elDir+"/c_z-n_", nil, zk.EphemeralSequential)
			if err != nil {
				return 0, err
			}
			ok, _, ch, err := watcher.ExistsW(ctx, p)
			if err != nil || !ok {
				return 0, fmt.Errorf("watch: %v %v", ok, err)
			}
			t0 := time.Now()
			if err := s.Delete(ctx, p, -1); err != nil {
				return 0, err
			}
			select {
			case <-ch:
				return time.Since(t0), nil
			case <-time.After(5 * time.Second):
				return 0, errors.New("no watch event")
			}
		}},
	}
	// Hooks: the trivial promote hook of the cluster benchmarks, and /bin/true.
	tmp := b.TempDir()
	evPath := filepath.Join(tmp, "events.log")
	hook := filepath.Join(tmp, "hook.sh")
	script := "#!/bin/bash\nprintf '%s %s\\n' \"${EPOCHREALTIME//[!0-9]/}000\" \"promote node=$FAILOVERD_NODE_ID\" >> \"" + evPath + "\"\n"
	if err := os.WriteFile(hook, []byte(script), 0o755); err != nil {
		b.Fatal(err)
	}
	env := []string{"FAILOVERD_CLUSTER=e2e", "FAILOVERD_NODE_ID=a", "FAILOVERD_EPOCH=1", "FAILOVERD_ROLE=leader", "FAILOVERD_REASON=elected"}
	hookStart := func() (time.Duration, error) {
		os.Remove(evPath)
		t0 := time.Now()
		if _, err := proc.Run(ctx, proc.Spec{Argv: []string{hook}, Env: env, Timeout: 5 * time.Second}); err != nil {
			return 0, err
		}
		return eventAfter(evPath, t0)
	}
	// The compiled trivial hook, installed as promote.sh beside the events log.
	compiled := filepath.Join(tmp, "promote.sh")
	hookBin, lang := hookev(b)
	bin, err := os.ReadFile(hookBin)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(compiled, bin, 0o755); err != nil {
		b.Fatal(err)
	}
	compiledStart := func() (time.Duration, error) {
		os.Remove(evPath)
		t0 := time.Now()
		if _, err := proc.Run(ctx, proc.Spec{Argv: []string{compiled}, Env: env, Timeout: 5 * time.Second}); err != nil {
			return 0, err
		}
		return eventAfter(evPath, t0)
	}
	steps = append(steps,
		step{"hook: compiled trivial hook (hookev in " + lang + "), start (proc.Run → reads clock)", compiledStart},
		step{"hook: compiled trivial hook (hookev in " + lang + "), whole run (proc.Run)", timed(func() error {
			_, err := proc.Run(ctx, proc.Spec{Argv: []string{compiled}, Env: env, Timeout: 5 * time.Second})
			return err
		})},
		step{"hook: trivial bash hook, start (proc.Run → script reads clock)", hookStart},
		step{"hook: trivial bash hook, whole run (proc.Run)", timed(func() error {
			_, err := proc.Run(ctx, proc.Spec{Argv: []string{hook}, Env: env, Timeout: 5 * time.Second})
			return err
		})},
		step{"hook: /bin/true, whole run (proc.Run)", timed(func() error {
			_, err := proc.Run(ctx, proc.Spec{Argv: []string{"/bin/true"}, Env: env, Timeout: 5 * time.Second})
			return err
		})},
	)
	for _, st := range steps {
		var ds []time.Duration
		for i := 0; i < n; i++ {
			d, err := st.run()
			if err != nil {
				b.Fatalf("%s: %v", st.name, err)
			}
			ds = append(ds, d)
		}
		res := Result{Scenario: scSteps, Name: st.name, Runs: len(ds)}
		res.fill(ds)
		record(b, res)
	}
}

// eventAfter reads the time of the first event line of path, relative to t0.
func eventAfter(path string, t0 time.Time) (time.Duration, error) {
	bs, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(bs))
	if len(f) == 0 {
		return 0, errors.New("empty events log")
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, err
	}
	return time.Unix(0, ns).Sub(t0), nil
}
