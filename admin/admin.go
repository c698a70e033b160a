// Package admin serves failoverd's HTTP API: metrics, liveness, this node's
// status, load-balancer role checks, and the two mutating endpoints
// (demote, cede).
//
// # Endpoints
//
//	GET  /metrics      Prometheus exposition of the given Gatherer
//	GET  /healthz      200 "ok" while the daemon runs
//	GET  /v1/status    controller.Status as JSON
//	GET  /leader       200 when this node is the promoted leader, else 503
//	GET  /standby      200 when this node is a healthy standby, else 503
//	POST /v1/demote    demote now (the server side of the rpc fencer)
//	POST /v1/cede?for=30s  give up leadership and stay out of the election
//
// Read endpoints also answer HEAD and refuse other methods with 405.
//
// # Authorization
//
// The mutating endpoints require "Authorization: Bearer <token>". When no
// token is configured they answer 403 to everyone, so a node without a
// token can never be demoted or ceded remotely. The token is compared in
// constant time and never logged. Read endpoints are open: bind the API to
// loopback or a management network. Across hosts, serve it over HTTPS
// (WithTLS): peers' rpc fencing sends the token over plain HTTP only to
// loopback addresses.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/fencer"
)

// Paths served by NewHandler. The demote path is fencer.DemotePath.
const (
	MetricsPath = "/metrics"
	HealthzPath = "/healthz"
	StatusPath  = "/v1/status"
	LeaderPath  = "/leader"
	StandbyPath = "/standby"
	CedePath    = "/v1/cede"
)

// MaxCede bounds POST /v1/cede's "for": a longer absence is a maintenance
// decision better made by stopping the daemon.
const MaxCede = 24 * time.Hour

// Node is the daemon seen from the admin API; the controller implements it.
type Node interface {
	// Status is this node's current view of itself; it must not block.
	Status() controller.Status
	// Demoter serves POST /v1/demote.
	fencer.Demoter
	// Cede gives up leadership, if held, and keeps this node out of the
	// election for d.
	Cede(ctx context.Context, d time.Duration) error
}

// RoleAnswer is the body of GET /leader and GET /standby.
type RoleAnswer struct {
	NodeID string           `json:"node_id"`
	State  controller.State `json:"state"`
	Health string           `json:"health"`
	Epoch  int64            `json:"epoch"`
}

// CedeAnswer is the body of the answer to POST /v1/cede.
type CedeAnswer struct {
	// Ceded is true when the node accepted to stay out of the election.
	Ceded bool `json:"ceded"`
	// NodeID is the answering node's id.
	NodeID string `json:"node_id,omitempty"`
	// For is the accepted duration, as Go writes it ("30s").
	For string `json:"for,omitempty"`
	// Error says why the request was refused or failed.
	Error string `json:"error,omitempty"`
}

// healthyHealth is how controller.Status.Health spells a healthy service
// (healthcheck.Healthy.String()).
const healthyHealth = "healthy"

// NewHandler returns the admin API for n. reg is served on /metrics. An
// empty token disables the mutating endpoints. A nil logger discards.
func NewHandler(n Node, reg prometheus.Gatherer, token string, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "admin")

	mux := http.NewServeMux()
	// "GET " patterns also match HEAD, and the mux answers other methods
	// with 405 and an Allow header.
	mux.Handle("GET "+MetricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: promLogger{logger},
	}))
	mux.HandleFunc("GET "+HealthzPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET "+StatusPath, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, n.Status())
	})
	mux.HandleFunc("GET "+LeaderPath, roleHandler(n, func(s controller.Status) bool {
		return s.State == controller.StateLeader
	}))
	mux.HandleFunc("GET "+StandbyPath, roleHandler(n, func(s controller.Status) bool {
		return s.State == controller.StateStandby && s.Health == healthyHealth
	}))
	// The mutating handlers check the method themselves so that a disabled
	// endpoint answers 403 whatever the method, as fencer.DemoteHandler does.
	mux.Handle(fencer.DemotePath, logMutation(logger, fencer.DemoteHandler(n, token, n.Status().NodeID)))
	mux.Handle(CedePath, logMutation(logger, cedeHandler(n, token)))
	return mux
}

// roleHandler answers 200 when ok(status) holds, else 503, for load
// balancers that route by status code.
func roleHandler(n Node, ok func(controller.Status) bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		s := n.Status()
		code := http.StatusServiceUnavailable
		if ok(s) {
			code = http.StatusOK
		}
		writeJSON(w, code, RoleAnswer{NodeID: s.NodeID, State: s.State, Health: s.Health, Epoch: s.Epoch})
	}
}

func cedeHandler(n Node, token string) http.HandlerFunc {
	authorized := fencer.BearerCheck(token)
	return func(w http.ResponseWriter, r *http.Request) {
		if token == "" {
			writeJSON(w, http.StatusForbidden, CedeAnswer{Error: "mutating endpoints disabled"})
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeJSON(w, http.StatusMethodNotAllowed, CedeAnswer{Error: "method must be POST"})
			return
		}
		if !authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="failoverd"`)
			writeJSON(w, http.StatusUnauthorized, CedeAnswer{Error: "missing or wrong bearer token"})
			return
		}
		d, err := cedeDuration(r.URL.Query().Get("for"))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, CedeAnswer{Error: err.Error()})
			return
		}
		nodeID := n.Status().NodeID
		if err := n.Cede(r.Context(), d); err != nil {
			writeJSON(w, http.StatusInternalServerError, CedeAnswer{NodeID: nodeID, For: d.String(), Error: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, CedeAnswer{Ceded: true, NodeID: nodeID, For: d.String()})
	}
}

// cedeDuration parses the "for" query parameter.
func cedeDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New(`query parameter "for" is required, e.g. ?for=30s`)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf(`query parameter "for": %w`, err)
	}
	if d <= 0 || d > MaxCede {
		return 0, fmt.Errorf(`query parameter "for" must be > 0 and <= %s, got %s`, MaxCede, d)
	}
	return d, nil
}

// logMutation logs every call of a mutating endpoint, refused ones
// included, so an operator can tell who demoted or ceded a node. It logs no
// headers, body or query: the token must never reach a log, even when a
// client puts it in the wrong place.
func logMutation(logger *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		logger.Info("mutating request",
			"method", r.Method,
			"path", r.URL.Path,
			"remote_addr", r.RemoteAddr,
			"status", rec.status,
			"duration_seconds", time.Since(start).Seconds())
	})
}

// statusRecorder remembers the status code a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// promLogger sends promhttp's gathering errors to slog.
type promLogger struct{ l *slog.Logger }

func (p promLogger) Println(v ...any) {
	p.l.Error("metrics gathering failed", "err", strings.TrimSpace(fmt.Sprintln(v...)))
}
