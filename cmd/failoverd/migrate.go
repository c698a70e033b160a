package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/config"
)

// cmdMigrate moves a cluster from the coordination service (or ensemble,
// root, prefix) its nodes ran on, which --from's configuration names, to
// the one -c's names: the only way a node whose node state names the old
// cluster record joins the new place (cluster.Admit).
func cmdMigrate(args []string, stdout, stderr io.Writer) int {
	f := newFlags("migrate", "migrate -c NEW_FILE --from OLD_FILE", stderr)
	from := f.fs.String("from", "", "the configuration the nodes ran with: where the cluster is now (required)")
	f.fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: failoverd migrate -c NEW_FILE --from OLD_FILE

Moves the cluster from the place OLD_FILE names (coordination service,
ensemble, root or prefix) to the one NEW_FILE names: marks the old cluster
record moved, copies the breadcrumb, history and pause, and creates the new
record with an epoch floor above every epoch of the old place. Stop
failoverd on every node first (failoverd pause before that keeps the
service's primary up); safe to run again. See docs/operations.md, "Moving a
cluster".

Flags:
`)
		f.fs.PrintDefaults()
	}
	if code := f.parse(args); code >= 0 {
		return code
	}
	if *from == "" {
		fmt.Fprintln(stderr, "failoverd migrate: --from OLD_FILE is required")
		f.fs.Usage()
		return exitUsage
	}
	oldCfg, oldStore, closeOld, code := connect(*from, stderr)
	if code >= 0 {
		return code
	}
	defer closeOld()
	newCfg, newStore, closeNew, code := connect(f.config, stderr)
	if code >= 0 {
		return code
	}
	defer closeNew()
	if oldCfg.Cluster != newCfg.Cluster {
		fmt.Fprintf(stderr, "failoverd migrate: --from is of cluster %q, -c of cluster %q: a move keeps the cluster's name\n", oldCfg.Cluster, newCfg.Cluster)
		return exitUsage
	}
	ctx, cancel := withTimeout(30 * time.Second)
	defer cancel()
	m := migration{
		old: oldStore, new: newStore, mode: newCfg.Election.Mode,
		oldWhere: placeOf(oldCfg), newWhere: placeOf(newCfg),
	}
	if err := m.run(ctx, stdout); err != nil {
		fmt.Fprintln(stderr, "failoverd migrate:", err)
		return exitRuntime
	}
	return exitOK
}

// placeOf names where cfg's cluster lives, for messages:
// "zookeeper [a:2181 b:2181] /failoverd/orders".
func placeOf(cfg *config.Config) string {
	if cfg.Coordination.Backend == config.BackendEtcd && cfg.Etcd != nil {
		return fmt.Sprintf("etcd %v %s", cfg.Etcd.Endpoints, layoutOf(cfg).Dir())
	}
	return fmt.Sprintf("zookeeper %v %s", cfg.ZooKeeper.Servers, layoutOf(cfg).Dir())
}

// migration is one move of a cluster's records from old to new.
type migration struct {
	old, new           operatorStore
	oldWhere, newWhere string // for messages
	mode               string // the election mode of the new place
}

// run moves the cluster, in an order that is safe to stop at any step
// and to run again:
//
//  1. The old cluster record is marked moved (MovedTo): from then on no
//     node joins the old election, while its nodes already in it show up
//     in the next step.
//  2. Nobody may still run on the old place (no member record, no
//     election entry): else the mark is taken back and the move refused.
//  3. The mark's write stamp (a zxid or a revision above every epoch the
//     old place gave) plus the old record's floor is the new floor.
//  4. The breadcrumb, the history and the pause are copied, before
//  5. the new cluster record is created (with the floor, and the old ID in
//     MovedFrom): only then may the old cluster's nodes join it, and the
//     first leader finds the breadcrumb and fences the old leader.
func (m migration) run(ctx context.Context, out io.Writer) error {
	oldRec, oldRev, err := m.old.ClusterRecord(ctx)
	if err != nil {
		return err
	}
	if oldRec == nil {
		return fmt.Errorf("%s holds no cluster record: nothing to move (does --from name the configuration the nodes ran with?)", m.oldWhere)
	}
	newRec, _, err := m.new.ClusterRecord(ctx)
	if err != nil {
		return err
	}
	if newRec != nil {
		switch {
		case oldRec.ID != "" && newRec.ID == oldRec.ID:
			return fmt.Errorf("%s and %s hold the same cluster record (%s): nothing to move", m.oldWhere, m.newWhere, oldRec.ID)
		case oldRec.ID != "" && oldRec.MovedTo == newRec.ID && slices.Contains(newRec.MovedFrom, oldRec.ID):
			fmt.Fprintf(out, "already moved: %s (record %s) to %s (record %s, epoch floor %d)\n",
				m.oldWhere, oldRec.ID, m.newWhere, newRec.ID, newRec.EpochFloor)
			return nil
		}
		return fmt.Errorf("%s holds a cluster record already (id %s): nodes ran there, or another cluster does; "+
			"refusing to merge two elections (move to an empty place: another root or prefix)", m.newWhere, newRec.ID)
	}

	// Nobody may run there: checked before the mark too, so that a move
	// refused for it changes nothing.
	if alive, err := m.alive(ctx); err != nil || len(alive) > 0 {
		return orAlive(err, alive)
	}

	// 1. Mark the old record (a move stopped half way is marked already:
	// its write gives a new stamp all the same).
	newID := oldRec.MovedTo
	if newID == "" {
		newID = cluster.NewRecordID()
	}
	unmarked := *oldRec
	if unmarked.ID == "" { // a record of an earlier version no node gave an ID
		unmarked.ID = cluster.NewRecordID()
	}
	if oldRec.MovedTo != "" && oldRec.ModeBeforeMove != "" {
		unmarked.ElectionMode = oldRec.ModeBeforeMove
	}
	unmarked.MovedTo, unmarked.MovedToPlace, unmarked.ModeBeforeMove, unmarked.MovedAt = "", "", "", nil
	marked := unmarked
	now := time.Now().UTC()
	// The mode no version accepts keeps out nodes that do not know
	// MovedTo (an older failoverd started with the old configuration).
	marked.MovedTo, marked.MovedToPlace, marked.MovedAt = newID, m.newWhere, &now
	marked.ElectionMode, marked.ModeBeforeMove = cluster.MovedMode, unmarked.ElectionMode
	markRev, stamp, err := m.old.WriteClusterRecord(ctx, marked, oldRev)
	if err != nil {
		return fmt.Errorf("marking the old cluster record moved: %w", err)
	}
	fmt.Fprintf(out, "marked %s (record %s) moved to record %s: no node joins its election any more\n", m.oldWhere, marked.ID, newID)

	// 2. Nobody may run there.
	if alive, err := m.alive(ctx); err != nil || len(alive) > 0 {
		if uerr := m.unmark(ctx, markRev, unmarked); uerr != nil {
			return fmt.Errorf("%v; and the mark could not be taken back (%v): run migrate again once failoverd is stopped everywhere", orAlive(err, alive), uerr)
		}
		fmt.Fprintf(out, "took the mark back: the cluster stays on %s\n", m.oldWhere)
		return orAlive(err, alive)
	}

	// 3. The floor.
	floor := unmarked.EpochFloor + stamp
	// 4. The records that go along.
	carried, err := m.old.ReadCarried(ctx)
	if err != nil {
		return err
	}
	if err := m.new.WriteCarried(ctx, carried); err != nil {
		return fmt.Errorf("copying %v to %s: %w", carried.Names(), m.newWhere, err)
	}
	// 5. The new record.
	rec := cluster.ClusterRecord{
		ElectionMode: m.mode, ID: newID, EpochFloor: floor,
		MovedFrom: append(slices.Clone(unmarked.MovedFrom), unmarked.ID), MovedAt: &now,
	}
	if _, _, err := m.new.WriteClusterRecord(ctx, rec, cluster.Revision{}); err != nil {
		return fmt.Errorf("creating the cluster record at %s: %w", m.newWhere, err)
	}
	copied := "nothing else (no breadcrumb, history or pause)"
	if names := carried.Names(); len(names) > 0 {
		copied = strings.Join(names, ", ")
	}
	fmt.Fprintf(out, "moved: %s (record %s) to %s (record %s)\n", m.oldWhere, unmarked.ID, m.newWhere, newID)
	fmt.Fprintf(out, "epoch floor %d: every epoch there is above every epoch of the old place\n", floor)
	fmt.Fprintf(out, "copied: %s\n", copied)
	fmt.Fprintf(out, "next: give every node the new configuration and start failoverd; each joins the moved cluster\n")
	if carried.Pause != nil {
		fmt.Fprintf(out, "note: the cluster is paused (the pause came along): run failoverd resume -c NEW_FILE once every node runs\n")
	}
	return nil
}

// alive lists who still runs on the old place: member records and
// election entries.
func (m migration) alive(ctx context.Context) ([]string, error) {
	members, err := m.old.Members(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mb := range members {
		out = append(out, "member "+mb.NodeID)
	}
	queue, err := m.old.Queue(ctx)
	if err != nil {
		return nil, err
	}
	for _, q := range queue {
		out = append(out, "candidate "+q)
	}
	return out, nil
}

// unmark takes step 1 back, if the old record is still as our mark left
// it (at markRev): a move run again meanwhile marks it anew, with the same
// new ID, and may have gone on to create the new record; its mark stays.
func (m migration) unmark(ctx context.Context, markRev cluster.Revision, unmarked cluster.ClusterRecord) error {
	if _, _, err := m.old.WriteClusterRecord(ctx, unmarked, markRev); err != nil {
		return fmt.Errorf("the old cluster record changed since our mark (another migrate?): %w", err)
	}
	return nil
}

// orAlive is err, or the refusal of a move while alive run.
func orAlive(err error, alive []string) error {
	if err != nil {
		return fmt.Errorf("cannot tell whether failoverd still runs on the old place: %w", err)
	}
	return fmt.Errorf("failoverd still runs on the old place (%s): stop it on every node first, nothing was changed "+
		"(a node that crashed leaves its records until its session or lease expires: zookeeper.session_timeout or etcd.lease_ttl)",
		strings.Join(alive, ", "))
}
