package controllertest

import (
	"context"
	"fmt"

	"github.com/failoverd/failoverd/cluster"
)

// Entry names the term's election entry: its key, its node's session and
// its epoch.
func (t *Term) Entry() cluster.Entry {
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	return cluster.Entry{Key: t.e.key, Owner: t.e.session, Created: t.epoch}
}

// RemoveEntry removes the entry e names if it is still in the election,
// of that session and epoch (cluster.EntryRemover): its term ends as one
// whose entry was deleted.
func (n *Node) RemoveEntry(ctx context.Context, e cluster.Entry) error {
	w := n.w
	w.mu.Lock()
	for _, x := range w.queue {
		if x.key != e.Key || x.session != e.Owner || x.term == nil || x.term.epoch != e.Created {
			continue
		}
		t := x.term
		w.remove(x)
		t.invalid = cluster.ErrEntryDeleted
		w.mu.Unlock()
		t.cancel(cluster.ErrEntryDeleted)
		return nil
	}
	w.mu.Unlock()
	return fmt.Errorf("%w: %s", cluster.ErrEntryChanged, e)
}
