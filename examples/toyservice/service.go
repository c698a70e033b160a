package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Roles of the toy service.
const (
	RolePrimary = "primary"
	RoleStandby = "standby"
)

// roleFile is the name of the role file in the state directory.
const roleFile = "role.json"

// RoleState is what the service keeps in DIR/role.json and serves on /role.
type RoleState struct {
	Node string `json:"node"`
	Role string `json:"role"`
	// Epoch is the newest epoch this service has seen: the one it was last
	// promoted with, or a newer one a fencer told it about. A promote with a
	// lower epoch comes from a leader that has since been replaced.
	Epoch int64 `json:"epoch"`
	// Retired is the newest epoch whose leadership has ended here (by a
	// demote or a fence). Promoting again with it would resurrect a leader
	// that was already stood down, so that is refused too.
	Retired int64     `json:"retired_epoch,omitempty"`
	Since   time.Time `json:"since"`
}

// ServiceConfig configures a Service.
type ServiceConfig struct {
	Node     string
	StateDir string
	// StoreURL is the base URL of the shared fenced resource; empty means
	// writes are decided by a private store in StateDir/local-store.
	StoreURL string
	// UnhealthyFile, if it exists, makes /health fail.
	UnhealthyFile string
	// Standby starts the service as standby whatever role.json says (the
	// epochs it remembers are kept).
	Standby bool
	// Log receives JSON event lines (role changes, writes); nil discards.
	Log io.Writer
}

// Service is the toy primary/standby service of one node.
type Service struct {
	cfg    ServiceConfig
	client *http.Client
	local  *Store // when cfg.StoreURL is empty
	log    *eventLog

	mu       sync.Mutex // guards the fields below and role.json
	st       RoleState
	opHealth bool // the operator's switch, POST /admin/health
	seq      int64
}

// NewService loads the role file from cfg.StateDir (a missing one means a
// fresh standby) and returns the service.
func NewService(cfg ServiceConfig) (*Service, error) {
	if cfg.Node == "" || cfg.StateDir == "" {
		return nil, errors.New("node and state directory are required")
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, err
	}
	s := &Service{
		cfg:      cfg,
		client:   &http.Client{Timeout: 2 * time.Second},
		log:      newEventLog(cfg.Log),
		opHealth: true,
		st:       RoleState{Node: cfg.Node, Role: RoleStandby, Since: time.Now().UTC()},
	}
	found, err := readJSON(filepath.Join(cfg.StateDir, roleFile), &s.st)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", roleFile, err)
	}
	if found && s.st.Node != cfg.Node {
		return nil, fmt.Errorf("%s belongs to node %q, not %q", roleFile, s.st.Node, cfg.Node)
	}
	if s.st.Role != RolePrimary && s.st.Role != RoleStandby {
		return nil, fmt.Errorf("%s: unknown role %q", roleFile, s.st.Role)
	}
	if cfg.Standby && s.st.Role == RolePrimary {
		if err := s.setLocked(RoleStandby, s.st.Epoch, max(s.st.Retired, s.st.Epoch)); err != nil {
			return nil, err
		}
	}
	if cfg.StoreURL == "" {
		if s.local, err = OpenStore(filepath.Join(cfg.StateDir, "local-store")); err != nil {
			return nil, err
		}
	}
	s.log.Event("start", "node", s.st.Node, "role", s.st.Role, "epoch", s.st.Epoch)
	return s, nil
}

// Close releases the local store, if any.
func (s *Service) Close() error {
	if s.local != nil {
		return s.local.Close()
	}
	return nil
}

// Role returns the current role state.
func (s *Service) Role() RoleState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// setLocked saves the new state to role.json, then adopts it: memory never
// runs ahead of what a restart would find. s.mu must be held.
func (s *Service) setLocked(role string, epoch, retired int64) error {
	next := RoleState{Node: s.cfg.Node, Role: role, Epoch: epoch, Retired: retired, Since: s.st.Since}
	if role != s.st.Role {
		next.Since = time.Now().UTC()
	}
	if err := writeJSONAtomic(filepath.Join(s.cfg.StateDir, roleFile), next); err != nil {
		return fmt.Errorf("saving %s: %w", roleFile, err)
	}
	s.st = next
	return nil
}

// ErrStaleEpoch is returned by Promote for an epoch older than one seen.
var ErrStaleEpoch = errors.New("stale epoch")

// Promote makes the service primary under epoch. Promoting again with the
// current epoch is a no-op, so a retried hook is harmless.
func (s *Service) Promote(epoch int64) (RoleState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case epoch < 1:
		return s.st, errors.New("epoch must be >= 1")
	case epoch < s.st.Epoch:
		return s.st, fmt.Errorf("%w: %d is older than %d", ErrStaleEpoch, epoch, s.st.Epoch)
	case epoch <= s.st.Retired:
		return s.st, fmt.Errorf("%w: leadership %d was already stood down here", ErrStaleEpoch, epoch)
	case s.st.Role == RolePrimary && epoch == s.st.Epoch:
		return s.st, nil
	}
	if err := s.setLocked(RolePrimary, epoch, s.st.Retired); err != nil {
		return s.st, err
	}
	s.log.Event("promote", "node", s.st.Node, "role", s.st.Role, "epoch", epoch)
	return s.st, nil
}

// Demote makes the service standby. With fenceEpoch > 0 (a fencer's call)
// it only ends leaderships up to that epoch: a primary already promoted with
// a newer epoch stays primary, since the leadership being fenced is over
// anyway. It reports whether the role changed.
func (s *Service) Demote(fenceEpoch int64) (RoleState, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fenceEpoch > 0 && s.st.Role == RolePrimary && s.st.Epoch > fenceEpoch {
		return s.st, false, nil
	}
	retired := max(s.st.Retired, s.st.Epoch, fenceEpoch)
	if s.st.Role == RoleStandby && retired == s.st.Retired && fenceEpoch <= s.st.Epoch {
		return s.st, false, nil
	}
	was := s.st.Role
	if err := s.setLocked(RoleStandby, max(s.st.Epoch, fenceEpoch), retired); err != nil {
		return s.st, false, err
	}
	s.log.Event("demote", "node", s.st.Node, "role", s.st.Role, "epoch", s.st.Epoch, "fence_epoch", fenceEpoch, "was", was)
	return s.st, was != s.st.Role, nil
}

// Healthy reports what /health answers.
func (s *Service) Healthy() bool {
	s.mu.Lock()
	ok := s.opHealth
	s.mu.Unlock()
	if f := s.cfg.UnhealthyFile; ok && f != "" {
		if _, err := os.Stat(f); err == nil {
			return false
		}
	}
	return ok
}

// SetHealthy flips the operator's health switch.
func (s *Service) SetHealthy(ok bool) {
	s.mu.Lock()
	s.opHealth = ok
	s.mu.Unlock()
	s.log.Event("health", "node", s.cfg.Node, "ok", ok)
}

// WriteResult is the outcome of one write attempt.
type WriteResult struct {
	Write
	Verdict
	Status int    `json:"status"`          // HTTP status /write answers with
	Error  string `json:"error,omitempty"` // why nothing was decided
}

// WriteOnce writes the next sequence number under the current epoch, if
// primary. The epoch is read before the request is sent, like any real
// client that may be paused in between: that is exactly the stale write the
// store must refuse.
func (s *Service) WriteOnce(ctx context.Context) WriteResult {
	s.mu.Lock()
	if s.st.Role != RolePrimary {
		s.mu.Unlock()
		return WriteResult{Write: Write{Node: s.cfg.Node}, Status: http.StatusServiceUnavailable, Error: "not primary"}
	}
	s.seq++
	w := Write{Node: s.cfg.Node, Epoch: s.st.Epoch, Seq: s.seq}
	s.mu.Unlock()

	res := WriteResult{Write: w}
	if s.local != nil {
		v, err := s.local.Write(w)
		res.Verdict = v
		switch {
		case err != nil:
			res.Status, res.Error = http.StatusInternalServerError, err.Error()
		case v.Accepted:
			res.Status = http.StatusOK
		default:
			res.Status = http.StatusConflict
		}
		return res
	}
	body, _ := json.Marshal(w)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(s.cfg.StoreURL, "/")+"/write", bytes.NewReader(body))
	if err != nil {
		res.Status, res.Error = http.StatusInternalServerError, err.Error()
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		res.Status, res.Error = http.StatusBadGateway, err.Error()
		return res
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusConflict:
		if err := json.Unmarshal(data, &res.Verdict); err != nil {
			res.Status, res.Error = http.StatusBadGateway, "bad answer from store: "+err.Error()
			return res
		}
		res.Status = resp.StatusCode
	default:
		res.Status = http.StatusBadGateway
		res.Error = fmt.Sprintf("store answered %s: %s", resp.Status, strings.TrimSpace(string(data)))
	}
	return res
}

// RunWriter writes every interval while primary, logging each attempt as a
// "write" event, until ctx ends.
func (s *Service) RunWriter(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.Role().Role != RolePrimary {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		r := s.WriteOnce(wctx)
		cancel()
		if r.Error == "not primary" { // demoted in between: nothing was sent
			continue
		}
		s.log.Event("write", "node", r.Node, "epoch", r.Epoch, "seq", r.Seq, "accepted", r.Accepted,
			"status", r.Status, "reason", r.Reason, "max_epoch", r.MaxEpoch, "error", r.Error)
	}
}

// Handler serves the service's HTTP API.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if !s.Healthy() {
			http.Error(w, "unhealthy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /admin/health", func(w http.ResponseWriter, r *http.Request) {
		ok, err := strconv.ParseBool(r.URL.Query().Get("ok"))
		if err != nil {
			http.Error(w, "want ?ok=true or ?ok=false", http.StatusBadRequest)
			return
		}
		s.SetHealthy(ok)
		writeJSON(w, http.StatusOK, map[string]bool{"ok": ok, "healthy": s.Healthy()})
	})
	mux.HandleFunc("GET /role", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Role())
	})
	mux.HandleFunc("POST /promote", func(w http.ResponseWriter, r *http.Request) {
		epoch, err := strconv.ParseInt(r.URL.Query().Get("epoch"), 10, 64)
		if err != nil {
			http.Error(w, "want ?epoch=N", http.StatusBadRequest)
			return
		}
		st, err := s.Promote(epoch)
		switch {
		case errors.Is(err, ErrStaleEpoch):
			writeJSON(w, http.StatusConflict, map[string]any{"error": err.Error(), "state": st})
		case err != nil && epoch < 1:
			http.Error(w, err.Error(), http.StatusBadRequest)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			writeJSON(w, http.StatusOK, st)
		}
	})
	mux.HandleFunc("POST /demote", func(w http.ResponseWriter, r *http.Request) {
		var epoch int64
		if e := r.URL.Query().Get("epoch"); e != "" {
			var err error
			if epoch, err = strconv.ParseInt(e, 10, 64); err != nil || epoch < 0 {
				http.Error(w, "want ?epoch=N (N >= 0) or no epoch", http.StatusBadRequest)
				return
			}
		}
		st, _, err := s.Demote(epoch)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, r *http.Request) {
		res := s.WriteOnce(r.Context())
		s.log.Event("write", "node", res.Node, "epoch", res.Epoch, "seq", res.Seq, "accepted", res.Accepted,
			"status", res.Status, "reason", res.Reason, "max_epoch", res.MaxEpoch, "error", res.Error)
		writeJSON(w, res.Status, res)
	})
	return mux
}

// eventLog writes one JSON object per line, each with a "time" in RFC 3339
// with nanoseconds, so the chaos harness can merge logs on one clock.
type eventLog struct {
	mu sync.Mutex
	w  io.Writer
}

func newEventLog(w io.Writer) *eventLog {
	if w == nil {
		w = io.Discard
	}
	return &eventLog{w: w}
}

// Event logs event with key/value pairs; empty strings are left out.
func (l *eventLog) Event(event string, kv ...any) {
	m := map[string]any{"time": time.Now().UTC().Format(time.RFC3339Nano), "event": event}
	for i := 0; i+1 < len(kv); i += 2 {
		if v, ok := kv[i+1].(string); ok && v == "" {
			continue
		}
		m[fmt.Sprint(kv[i])] = kv[i+1]
	}
	line, _ := json.Marshal(m)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(append(line, '\n'))
}
