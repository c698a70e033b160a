package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/failoverd/failoverd/config"
)

// homeState is the node state file: where this node last ran (the cluster
// record's ID) and the highest epoch it led with. It lives in
// node.state_dir, one file per cluster and node id, and only the daemon's
// user can read it.
type homeState struct {
	Cluster string `json:"cluster"`
	NodeID  string `json:"node_id"`
	// RecordID is the ID of the cluster record this node last joined.
	RecordID string `json:"record_id,omitempty"`
	// Coordination names the service and place of that record, for the
	// operator ("zookeeper [..] /failoverd").
	Coordination string `json:"coordination,omitempty"`
	// HighestEpoch is the highest epoch this node won a term with.
	HighestEpoch int64     `json:"highest_epoch,omitempty"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// homeFile is the controller's Home, kept in the node state file. Its
// methods are safe for concurrent use; every change is written to a new
// file, synced and renamed over the old one.
type homeFile struct {
	path  string
	where string // the coordination service and place of this run

	mu sync.Mutex
	st homeState
}

// homePath is cfg's node state file.
func homePath(cfg *config.Config) string {
	return filepath.Join(cfg.Node.StateDir, cfg.Cluster, cfg.Node.ID+".json")
}

// openHome reads cfg's node state file (none: this node's first start),
// creating node.state_dir when missing. An unreadable file is an error:
// what it held is what keeps this node out of another cluster's election.
func openHome(cfg *config.Config, where string) (*homeFile, error) {
	h := &homeFile{path: homePath(cfg), where: where, st: homeState{Cluster: cfg.Cluster, NodeID: cfg.Node.ID}}
	if err := os.MkdirAll(filepath.Dir(h.path), 0o700); err != nil {
		return nil, fmt.Errorf("node.state_dir: %w", err)
	}
	st, found, err := readHome(h.path)
	if err != nil {
		return nil, err
	}
	if found {
		if st.Cluster != cfg.Cluster || st.NodeID != cfg.Node.ID {
			return nil, fmt.Errorf("the node state file %s is of cluster %q, node %q, not of this node (cluster %q, node %q)",
				h.path, st.Cluster, st.NodeID, cfg.Cluster, cfg.Node.ID)
		}
		h.st = st
	}
	return h, nil
}

// readHome reads a node state file (found false: there is none).
func readHome(path string) (homeState, bool, error) {
	var st homeState
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("reading the node state file: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, false, fmt.Errorf("the node state file %s is unreadable (%v): it holds the cluster record this node last ran in, "+
			"which keeps it out of another cluster's election; restore it, or, only if this node is sure to be where its "+
			"cluster runs, move it aside", path, err)
	}
	return st, true, nil
}

func (h *homeFile) Load() (string, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st.RecordID, h.st.HighestEpoch
}

func (h *homeFile) Joined(id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.st
	st.RecordID, st.Coordination = id, h.where
	return h.write(st)
}

func (h *homeFile) Saw(epoch int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if epoch <= h.st.HighestEpoch {
		return nil
	}
	st := h.st
	st.HighestEpoch = epoch
	return h.write(st)
}

// write replaces the file with st, durably, and then remembers st (h.mu
// held).
func (h *homeFile) write(st homeState) error {
	st.UpdatedAt = time.Now().UTC()
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileSync(h.path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing the node state file: %w", err)
	}
	h.st = st
	return nil
}

// writeFileSync writes data to path through a temporary file in the same
// directory, synced and renamed over path, and syncs the directory: after
// a crash path holds either the old or the new contents.
func writeFileSync(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // gone after the rename; a leftover otherwise
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
