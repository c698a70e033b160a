package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/failoverd/failoverd/cluster"
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
	HighestEpoch int64 `json:"highest_epoch,omitempty"`
	// Entry is the election entry of the last term this node won, written
	// before the term reached the controller; Instance is the process
	// that last ran with the lock beside this file, written at its start.
	// Only with election.end_own_term_on_restart (see restart.go).
	Entry    *cluster.Entry `json:"election_entry,omitempty"`
	Instance string         `json:"instance,omitempty"`
	// BootID is the kernel boot (/proc/sys/kernel/random/boot_id) in
	// which Instance ran and Entry was won. The lock beside this file
	// proves an earlier process gone only within one boot of one kernel:
	// a copy of the state directory on another host, or a file from
	// before a reboot, names a process this lock says nothing about.
	BootID    string    `json:"boot_id,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// homeFile is the controller's Home, kept in the node state file. Its
// methods are safe for concurrent use; every change is written to a new
// file, synced and renamed over the old one.
type homeFile struct {
	path  string
	where string // the coordination service and place of this run

	mu sync.Mutex
	st homeState

	lockFile *os.File // lock: held until the process exits
}

// homePath is cfg's node state file.
func homePath(cfg *config.Config) string {
	return filepath.Join(cfg.Node.StateDir, cfg.Cluster, cfg.Node.ID+".json")
}

// openHome reads cfg's node state file (none: this node's first start),
// creating node.state_dir when missing. An unreadable file is an error:
// what it held is what keeps this node out of another cluster's election.
func openHome(cfg *config.Config, where string) (*homeFile, error) {
	return openHomeWith(cfg, where, false)
}

// openLockedHome is openHome with the lock beside the file taken first,
// before the file is read: it fails when another process of this node
// holds that lock.
func openLockedHome(cfg *config.Config, where string) (*homeFile, error) {
	return openHomeWith(cfg, where, true)
}

func openHomeWith(cfg *config.Config, where string, lock bool) (*homeFile, error) {
	h := &homeFile{path: homePath(cfg), where: where, st: homeState{Cluster: cfg.Cluster, NodeID: cfg.Node.ID}}
	if err := os.MkdirAll(filepath.Dir(h.path), 0o700); err != nil {
		return nil, fmt.Errorf("node.state_dir: %w", err)
	}
	if lock {
		if err := h.lock(); err != nil {
			return nil, err
		}
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

// Entered records e, the election entry of a term this process just won.
func (h *homeFile) Entered(e cluster.Entry) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.st
	st.Entry = &e
	return h.write(st)
}

// Started records instance as the process that runs now, in the kernel
// boot boot, and returns the election entry and the instance an earlier
// process recorded (ok false: no entry). Both are returned only if they
// were recorded in this same boot (trusted true): otherwise they name a
// process of another kernel (a reboot, or a copy of the state directory
// on another host), which the lock does not prove gone, and they are
// dropped. Call it with the lock held, before this process won anything.
func (h *homeFile) Started(instance, boot string) (e cluster.Entry, prev string, ok, trusted bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.st
	trusted = boot != "" && st.BootID == boot
	if trusted {
		prev = st.Instance
		if st.Entry != nil {
			e, ok = *st.Entry, true
		}
	}
	st.Instance, st.BootID, st.Entry = instance, boot, nil
	if ok {
		st.Entry = &e // still to remove: kept until removed (ForgetEntry)
	}
	return e, prev, ok, trusted, h.write(st)
}

// bootIDPath holds the kernel's boot id, new at every boot.
var bootIDPath = "/proc/sys/kernel/random/boot_id"

// bootID returns the kernel's boot id ("" when unreadable: nothing
// recorded is then trusted).
func bootID() string {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Entry returns the recorded election entry (ok false: none).
func (h *homeFile) Entry() (cluster.Entry, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.st.Entry == nil {
		return cluster.Entry{}, false
	}
	return *h.st.Entry, true
}

// ForgetEntry drops the recorded entry if it is still e.
func (h *homeFile) ForgetEntry(e cluster.Entry) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.st.Entry == nil || *h.st.Entry != e {
		return nil
	}
	st := h.st
	st.Entry = nil
	return h.write(st)
}

// lockPath is the lock file beside the node state file.
func (h *homeFile) lockPath() string { return strings.TrimSuffix(h.path, ".json") + ".lock" }

// lock takes an exclusive flock on the lock file beside the node state
// file, without waiting, and keeps it for the life of the process (the
// descriptor is close-on-exec: hooks do not inherit it). The kernel drops
// it only when this process is gone, so a later process that takes it
// knows every earlier one of this node has exited (within this boot of
// this kernel only). The holder writes its pid into the file, so that a
// process refused can name it.
func (h *homeFile) lock() error {
	f, err := os.OpenFile(h.lockPath(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("node.state_dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		holder := "another process"
		if b, rerr := os.ReadFile(h.lockPath()); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			holder = "process " + strings.TrimSpace(string(b))
		}
		return fmt.Errorf("%s is locked by %s of this node (cluster %q, node %q): another failoverd of this node is running; "+
			"stop it first (%w)", h.lockPath(), holder, h.st.Cluster, h.st.NodeID, err)
	}
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "%d\n", os.Getpid())
	}
	h.lockFile = f // never closed: the lock lasts as long as the process
	return nil
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
