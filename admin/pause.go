package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/cluster"
)

// Pauser sets and clears the cluster's pause record (maintenance mode);
// cluster/zkcluster.Store implements it.
type Pauser interface {
	// SetPause pauses the cluster unless it is paused already; it returns
	// the pause in force and whether this call created it.
	SetPause(ctx context.Context, p cluster.Pause) (cluster.Pause, bool, error)
	// ClearPause ends the pause; it reports whether there was one.
	ClearPause(ctx context.Context) (bool, error)
}

// pauseTimeout bounds the ZooKeeper write behind POST /v1/pause and
// /v1/resume.
const pauseTimeout = 10 * time.Second

// pause serves POST /v1/pause once mutating let it through: the whole
// cluster stops automatic promotion, demotion and fencing. Pausing a
// paused cluster keeps the first pause (200, changed false).
func (a *api) pause(w http.ResponseWriter, r *http.Request) {
	if a.pauser == nil {
		writeJSON(w, http.StatusServiceUnavailable, adminapi.PauseAnswer{Error: "this node cannot pause the cluster (no pause store)"})
		return
	}
	var req adminapi.PauseRequest
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, adminapi.MaxPauseBody))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, adminapi.PauseAnswer{Error: "request body too large"})
		return
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &req); err != nil {
			writeJSON(w, http.StatusBadRequest, adminapi.PauseAnswer{Error: "invalid request body: " + err.Error()})
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), pauseTimeout)
	defer cancel()
	p := cluster.Pause{By: "admin api from " + r.RemoteAddr, Reason: req.Reason, At: time.Now().UTC()}
	if err := p.Check(); err != nil {
		writeJSON(w, http.StatusBadRequest, adminapi.PauseAnswer{Error: err.Error()})
		return
	}
	cur, created, err := a.pauser.SetPause(ctx, p)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, adminapi.PauseAnswer{Error: "pausing the cluster: " + err.Error()})
		return
	}
	a.logger.Warn("cluster pause requested over the admin api", "by", p.By, "reason", p.Reason, "changed", created)
	at := cur.At
	writeJSON(w, http.StatusOK, adminapi.PauseAnswer{Paused: true, Changed: created, By: cur.By, Reason: cur.Reason, At: &at})
}

// resume serves POST /v1/resume once mutating let it through. Resuming a
// cluster that is not paused is not an error (200, changed false).
func (a *api) resume(w http.ResponseWriter, r *http.Request) {
	if a.pauser == nil {
		writeJSON(w, http.StatusServiceUnavailable, adminapi.PauseAnswer{Error: "this node cannot resume the cluster (no pause store)"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pauseTimeout)
	defer cancel()
	was, err := a.pauser.ClearPause(ctx)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, adminapi.PauseAnswer{Paused: true, Error: "resuming the cluster: " + err.Error()})
		return
	}
	a.logger.Info("cluster resume requested over the admin api", "remote_addr", r.RemoteAddr, "changed", was)
	writeJSON(w, http.StatusOK, adminapi.PauseAnswer{Changed: was})
}
