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
//	GET  /standby      200 when this node is a healthy standby that follows the
//	                   leader (Status.NotFollowing empty), else 503;
//	                   ?max_lag=N also 503 when its position is more than N
//	                   behind the leader's, or either is unknown
//	GET  /v1/leader    200 with the cluster's promoted leader (adminapi.Leader);
//	                   503 {"error": ...} when there is none or this node cannot tell
//	GET  /v1/history   200 with the cluster's history (a list of cluster.HistoryEntry,
//	                   oldest first); 503 {"error": ...} when it cannot be read
//	POST /v1/demote    demote now (the server side of the rpc fencer)
//	POST /v1/cede?for=30s  give up leadership and stay out of the election
//	POST /v1/pause     pause the whole cluster (maintenance mode), body {"reason": "..."}
//	POST /v1/resume    end the cluster's pause
//	POST /v1/reload    re-read the config file and apply it, all or nothing
//	                   (adminapi.ReloadAnswer; 422 when invalid or refused)
//
// Read endpoints also answer HEAD and refuse other methods with 405.
//
// # Authorization
//
// The mutating endpoints sit behind one middleware (mutating), checked in
// this order: no token configured answers 403 to everyone, so a node without
// a token can never be demoted or ceded remotely; a method other than POST
// answers 405 with "Allow: POST"; a missing or wrong
// "Authorization: Bearer <token>" answers 401 with a WWW-Authenticate
// challenge. Refusals carry {"error": "..."}. The token is compared in
// constant time and never logged; every call, refused or not, is logged. Read endpoints are open: bind the API to
// loopback or a management network. Across hosts, serve it over HTTPS
// (Config.TLS): peers' rpc fencing sends the token over plain HTTP only to
// loopback addresses.
package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
)

// Paths of the read endpoints; the mutating ones are adminapi.DemotePath
// and adminapi.CedePath.
const (
	MetricsPath = "/metrics"
	HealthzPath = "/healthz"
	StatusPath  = "/v1/status"
	LeaderPath  = "/leader"
	StandbyPath = "/standby"
)

// MaxCede bounds POST /v1/cede's "for": a longer absence is a maintenance
// decision better made by stopping the daemon.
const MaxCede = 24 * time.Hour

// Node is the daemon seen from the admin API; the controller implements it.
type Node interface {
	// Status is this node's current view of itself; it must not block.
	Status() controller.Status
	// Demote makes the local service stop acting as primary now (POST
	// /v1/demote). Demoted must be false unless that is done; Err says why
	// it is not.
	Demote(ctx context.Context, reason string) controller.DemoteOutcome
	// Cede gives up leadership, if held, and keeps this node out of the
	// election for d (POST /v1/cede).
	Cede(ctx context.Context, d time.Duration) error
}

// LeaderSource tells who the cluster's promoted leader is (GET /v1/leader).
// The daemon keeps it current from ZooKeeper.
type LeaderSource interface {
	// Leader is the promoted leader, nil when there is none, or an error
	// when this node cannot tell (its view may be stale); it may wait
	// briefly (about a second at most) to prove its answer current.
	Leader() (*cluster.Leader, error)
}

// healthyHealth is how controller.Status.Health spells a healthy service
// (healthcheck.Healthy.String()).
const healthyHealth = "healthy"

// api serves the endpoints of one node.
type api struct {
	node     Node
	leaders  LeaderSource // nil: GET /v1/leader answers 503
	pauser   Pauser       // nil: POST /v1/pause and /v1/resume answer 503
	reloader Reloader     // nil: POST /v1/reload answers 503
	// token is the bearer token's SHA-256, nil when there is none; a
	// reload replaces it (Server.SetToken).
	token  atomic.Pointer[[sha256.Size]byte]
	logger *slog.Logger
}

// Reloader reloads the daemon's config file (POST /v1/reload).
type Reloader interface {
	Reload(ctx context.Context) adminapi.ReloadAnswer
}

// setToken makes token the one the mutating endpoints require ("":
// disabled). Comparing digests keeps the comparison constant-time even in
// the token's length.
func (a *api) setToken(token string) {
	if token == "" {
		a.token.Store(nil)
		return
	}
	sum := sha256.Sum256([]byte(token))
	a.token.Store(&sum)
}

// newHandler returns the admin API for n, answering GET /v1/leader from
// leaders. reg is served on /metrics. An empty token disables the mutating
// endpoints.
func newHandler(a *api, reg prometheus.Gatherer) http.Handler {
	n := a.node

	mux := http.NewServeMux()
	// "GET " patterns also match HEAD, and the mux answers other methods
	// with 405 and an Allow header.
	mux.Handle("GET "+MetricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: promLogger{a.logger},
	}))
	mux.HandleFunc("GET "+HealthzPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET "+StatusPath, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, n.Status())
	})
	mux.HandleFunc("GET "+LeaderPath, a.role(func(s controller.Status) bool {
		return s.State == controller.StateLeader
	}))
	mux.HandleFunc("GET "+StandbyPath, a.standby)
	mux.HandleFunc("GET "+adminapi.LeaderPath, a.leader)
	// No method in these patterns: mutating checks the method itself, after
	// the token, so that a disabled endpoint answers 403 whatever the method.
	mux.Handle(adminapi.DemotePath, a.mutating(http.HandlerFunc(a.demote)))
	mux.Handle(adminapi.CedePath, a.mutating(http.HandlerFunc(a.cede)))
	mux.Handle(adminapi.PausePath, a.mutating(http.HandlerFunc(a.pause)))
	mux.Handle(adminapi.ResumePath, a.mutating(http.HandlerFunc(a.resume)))
	mux.Handle(adminapi.ReloadPath, a.mutating(http.HandlerFunc(a.reload)))
	return mux
}

// role answers 200 when ok(status) holds, else 503, for load balancers
// that route by status code.
func (a *api) role(ok func(controller.Status) bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		s := a.node.Status()
		code := http.StatusServiceUnavailable
		if ok(s) {
			code = http.StatusOK
		}
		writeJSON(w, code, adminapi.RoleAnswer{NodeID: s.NodeID, State: string(s.State), Health: s.Health, Epoch: s.Epoch})
	}
}

// standby answers GET /standby: 200 for a healthy standby that follows the
// current leader, else 503. With ?max_lag=N (a non-negative integer, in
// the units of service.position) it also needs its position to be at most
// N behind the leader's (both as last read: the leader's from its member
// record); an unknown position, or no known leader, answers 503, since
// the lag cannot be vouched for. A bad max_lag answers 400.
func (a *api) standby(w http.ResponseWriter, r *http.Request) {
	s := a.node.Status()
	answer := adminapi.RoleAnswer{NodeID: s.NodeID, State: string(s.State), Health: s.Health, Epoch: s.Epoch, NotFollowing: s.NotFollowing}
	ok := s.State == controller.StateStandby && s.Health == healthyHealth && s.NotFollowing == ""
	if q := r.URL.Query(); q.Has("max_lag") {
		maxLag, err := strconv.ParseInt(q.Get("max_lag"), 10, 64)
		if err != nil || maxLag < 0 {
			writeJSON(w, http.StatusBadRequest, errorAnswer{fmt.Sprintf("query parameter max_lag must be a non-negative integer, got %q", q.Get("max_lag"))})
			return
		}
		lag, why := a.lag(s)
		answer.Lag = lag
		if why != "" {
			answer.LagUnknown = why
		}
		ok = ok && lag != nil && *lag <= maxLag
	}
	code := http.StatusServiceUnavailable
	if ok {
		code = http.StatusOK
	}
	writeJSON(w, code, answer)
}

// lag is how far s's position is behind the promoted leader's (0 when not
// behind), or why it is unknown.
func (a *api) lag(s controller.Status) (*int64, string) {
	if s.Position == nil {
		return nil, "this node's position is unknown"
	}
	if a.leaders == nil {
		return nil, "this node does not know the leader"
	}
	l, err := a.leaders.Leader()
	switch {
	case err != nil:
		return nil, "this node cannot tell who leads: " + err.Error()
	case l == nil:
		return nil, "no leader"
	case l.Position == nil:
		return nil, "the leader's position is unknown"
	}
	d := max(0, *l.Position-*s.Position)
	return &d, ""
}

// leader answers GET /v1/leader: 200 with the promoted leader, 503 when
// there is none or this node cannot tell. A client that gets a 503 from
// one node may ask another; it must never be sent to a node that is still
// fencing, and LeaderSource never names one.
func (a *api) leader(w http.ResponseWriter, _ *http.Request) {
	if a.leaders == nil {
		writeJSON(w, http.StatusServiceUnavailable, errorAnswer{"this node does not know the leader (no leader source)"})
		return
	}
	l, err := a.leaders.Leader()
	switch {
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, errorAnswer{"this node cannot tell who leads: " + err.Error()})
	case l == nil:
		writeJSON(w, http.StatusServiceUnavailable, errorAnswer{"no leader"})
	default:
		writeJSON(w, http.StatusOK, LeaderAnswer(l))
	}
}

// LeaderAnswer is l on the wire (GET /v1/leader, failoverd leader --json).
func LeaderAnswer(l *cluster.Leader) adminapi.Leader {
	return adminapi.Leader{NodeID: l.NodeID, Host: l.Host, ServiceAddress: l.ServiceAddress,
		AdminURL: l.AdminURL, Epoch: l.Epoch, Since: l.Since}
}

// errorAnswer is the body of every refusal by mutating and of a 503 of
// GET /v1/leader. Both mutating endpoints' answers (adminapi.DemoteResponse,
// adminapi.CedeAnswer) read it as their own, with only Error set.
type errorAnswer struct {
	Error string `json:"error"`
}

// mutating guards an endpoint that changes the node: 403 when no token is
// configured, 405 with "Allow: POST" for another method, 401 with a
// WWW-Authenticate challenge for a missing or wrong bearer token, and only
// then h. Every call is logged, refused ones included.
func (a *api) mutating(h http.Handler) http.Handler {
	return a.logCall(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := a.token.Load()
		switch {
		case want == nil:
			writeJSON(w, http.StatusForbidden, errorAnswer{"mutating endpoints disabled"})
		case r.Method != http.MethodPost:
			w.Header().Set("Allow", http.MethodPost)
			writeJSON(w, http.StatusMethodNotAllowed, errorAnswer{"method must be POST"})
		case !bearerMatches(r, *want):
			w.Header().Set("WWW-Authenticate", `Bearer realm="failoverd"`)
			writeJSON(w, http.StatusUnauthorized, errorAnswer{"missing or wrong bearer token"})
		default:
			h.ServeHTTP(w, r)
		}
	}))
}

// bearerMatches reports whether r carries "Authorization: Bearer <token>"
// for the token whose SHA-256 is want.
func bearerMatches(r *http.Request, want [sha256.Size]byte) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	gotSum := sha256.Sum256([]byte(got))
	match := subtle.ConstantTimeCompare(gotSum[:], want[:]) == 1
	return ok && match
}

// demote serves POST /v1/demote once mutating let it through. A request
// that targets another node, or that comes from this node itself, is
// refused with 409 and never reaches the node: a node fences its own
// earlier term locally, so an rpc from itself means the admin URL peers use
// for it reaches its own daemon (a loopback address most likely), and
// stepping down would end the very term it is fencing for.
func (a *api) demote(w http.ResponseWriter, r *http.Request) {
	var req adminapi.DemoteRequest
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, adminapi.MaxDemoteBody))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, adminapi.DemoteResponse{Error: "request body too large"})
		return
	}
	// An empty body is allowed, so an operator can demote with a bare POST.
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &req); err != nil {
			writeJSON(w, http.StatusBadRequest, adminapi.DemoteResponse{Error: "invalid request body: " + err.Error()})
			return
		}
	}
	self := a.node.Status().NodeID
	switch {
	case self != "" && req.Target != "" && req.Target != self:
		writeJSON(w, http.StatusConflict, adminapi.DemoteResponse{NodeID: self,
			Error: fmt.Sprintf("this is node %q, not %q: not demoted (the admin URL used for %q reaches another daemon)", self, req.Target, req.Target)})
		return
	case self != "" && req.From == self:
		writeJSON(w, http.StatusConflict, adminapi.DemoteResponse{NodeID: self,
			Error: fmt.Sprintf("node %q asked itself to demote: not demoted (the admin URL it used reaches its own daemon, a loopback address most likely)", self)})
		return
	}
	out := a.node.Demote(r.Context(), demoteReason(req))
	answer := adminapi.DemoteResponse{Demoted: out.Demoted && out.Err == nil, NodeID: self, Epoch: out.Epoch}
	if out.Err != nil {
		answer.Error = out.Err.Error()
		writeJSON(w, http.StatusInternalServerError, answer)
		return
	}
	writeJSON(w, http.StatusOK, answer)
}

// demoteReason is what the node logs and passes to its demote hook.
func demoteReason(req adminapi.DemoteRequest) string {
	reason := req.Reason
	if reason == "" {
		reason = "demote requested over rpc"
	}
	if req.From != "" || req.Epoch != 0 {
		reason = fmt.Sprintf("%s (from %q, epoch %d)", reason, req.From, req.Epoch)
	}
	return reason
}

// cede serves POST /v1/cede?for=30s once mutating let it through.
func (a *api) cede(w http.ResponseWriter, r *http.Request) {
	d, err := cedeDuration(r.URL.Query().Get("for"))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, adminapi.CedeAnswer{Error: err.Error()})
		return
	}
	nodeID := a.node.Status().NodeID
	if err := a.node.Cede(r.Context(), d); err != nil {
		writeJSON(w, http.StatusInternalServerError, adminapi.CedeAnswer{NodeID: nodeID, For: d.String(), Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, adminapi.CedeAnswer{Ceded: true, NodeID: nodeID, For: d.String()})
}

// reload serves POST /v1/reload once mutating let it through: 200 when
// the file was applied, 422 when it is invalid or changes a key that needs
// a restart (nothing applied), 500 when applying failed.
func (a *api) reload(w http.ResponseWriter, r *http.Request) {
	if a.reloader == nil {
		writeJSON(w, http.StatusServiceUnavailable, adminapi.ReloadAnswer{Error: "this daemon cannot reload its config"})
		return
	}
	ans := a.reloader.Reload(r.Context())
	switch {
	case ans.Applied:
		writeJSON(w, http.StatusOK, ans)
	case len(ans.Invalid) > 0 || len(ans.Refused) > 0:
		writeJSON(w, http.StatusUnprocessableEntity, ans)
	default:
		writeJSON(w, http.StatusInternalServerError, ans)
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

// logCall logs every call of a mutating endpoint, refused ones included,
// so an operator can tell who demoted or ceded a node. It logs no headers,
// body or query: the token must never reach a log, even when a client puts
// it in the wrong place.
func (a *api) logCall(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		a.logger.Info("mutating request",
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
