package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/failoverd/failoverd/admin"
	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/healthcheck"
	"github.com/failoverd/failoverd/internal/secret"
	"github.com/failoverd/failoverd/metrics"
)

// Reload (SIGHUP, failoverd reload, POST /v1/reload) re-reads the config
// file with the validation of a start and applies it all or nothing: an
// invalid file, or one that changes a key config.ReloadRules says needs a
// restart, changes nothing, and every problem is logged by YAML path.
// Everything the new config needs (checks, hooks, fencer, token,
// certificate) is built before anything is applied, so that applying
// cannot fail halfway.

// loadedConfig is the config file a daemon runs.
type loadedConfig struct {
	path string
	hash string    // configHash of its bytes
	at   time.Time // when it was read
	// level is the log's level, which a reload sets.
	level *slog.LevelVar
}

// configHash identifies a config file in status: the start of its SHA-256.
func configHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:6])
}

// readConfig reads and validates the config file at path.
func readConfig(path string) (*config.Config, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err // *fs.PathError names the file
	}
	cfg, err := config.Parse(data, path)
	return cfg, data, err
}

// reloader reloads a running daemon's config.
type reloader struct {
	log     *slog.Logger
	metrics *metrics.Metrics
	ctrl    *controller.Controller
	monitor *healthcheck.Monitor
	server  *admin.Server

	mu    sync.Mutex // one reload at a time; guards the fields below
	start *config.Config
	cur   *config.Config
	file  loadedConfig
}

// reloadParts is what a new config needs, built before anything applies.
type reloadParts struct {
	ccfg     controller.Config
	reload   controller.Reload
	checker  healthcheck.Checker
	health   healthcheck.Config
	token    secret.Secret
	cert     *tls.Certificate
	logLevel slog.Level
}

// Reload re-reads the config file and applies it, or nothing; it answers
// POST /v1/reload and SIGHUP, and logs and counts every outcome.
func (r *reloader) Reload(ctx context.Context) adminapi.ReloadAnswer {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	ans := r.reload(ctx, now)
	r.metrics.ConfigReloaded(ans.Applied, now)
	ans.NodeID, ans.ConfigHash = r.cur.Node.ID, r.file.hash
	at := r.file.at
	ans.ConfigLoadedAt = &at
	return ans
}

func (r *reloader) reload(ctx context.Context, now time.Time) adminapi.ReloadAnswer {
	next, data, err := readConfig(r.file.path)
	if err != nil {
		problems := []string{err.Error()}
		var ve config.ValidationErrors
		if errors.As(err, &ve) {
			problems = problems[:0]
			for _, e := range ve {
				problems = append(problems, e.Error())
			}
		}
		r.log.Error("config reload failed: the file is invalid; nothing applied, running on the config loaded before",
			"file", r.file.path, "problems", len(problems), "config_hash", r.file.hash)
		for _, p := range problems {
			r.log.Error("config reload: invalid config", "problem", p)
		}
		return adminapi.ReloadAnswer{Invalid: problems}
	}
	ans := r.apply(ctx, next, data, now)
	ans.Warnings = next.Warnings()
	return ans
}

// apply applies next, valid, read as data; the answer has no warnings.
func (r *reloader) apply(ctx context.Context, next *config.Config, data []byte, now time.Time) adminapi.ReloadAnswer {
	hash := configHash(data)
	changes := config.CompareForReload(r.start, r.cur, next)
	var changed []string
	for _, c := range changes {
		changed = append(changed, c.Path)
	}
	if refused := config.Refused(changes); len(refused) > 0 {
		r.log.Error("config reload refused: the file changes keys that need a restart; nothing applied, running on the config loaded before",
			"refused", len(refused), "changed", strings.Join(changed, ","), "config_hash", r.file.hash)
		var out []string
		for _, c := range refused {
			r.log.Error("config reload: key needs a restart", "key", c.Path, "why", c.Refused)
			out = append(out, c.String())
		}
		return adminapi.ReloadAnswer{Changed: changed, Refused: out}
	}
	p, err := r.build(next, hash, now)
	if err != nil {
		r.log.Error("config reload failed: nothing applied, running on the config loaded before", "err", err)
		return adminapi.ReloadAnswer{Changed: changed, Error: err.Error()}
	}
	for _, w := range next.Warnings() {
		r.log.Warn(w)
	}

	// Apply. The controller may still refuse (it checks its own rules
	// again); after it nothing can fail.
	notes, err := r.ctrl.ReloadNotes(ctx, p.reload)
	if err != nil {
		r.log.Error("config reload failed: nothing applied, running on the config loaded before", "err", err)
		return adminapi.ReloadAnswer{Changed: changed, Error: err.Error()}
	}
	if touches(changed, "health.") {
		if err := r.monitor.Reconfigure(p.health, p.checker); err != nil {
			r.log.Error("config reload: the health check keeps its settings", "err", err) // validation rules this out
		}
	}
	r.server.SetToken(p.token)
	if p.cert != nil {
		if err := r.server.SetCertificate(*p.cert); err == nil && p.cert.Leaf != nil {
			r.log.Info("config reload: admin API certificate loaded for new connections",
				"subject", p.cert.Leaf.Subject.String(), "not_after", p.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	r.cur, r.file.hash, r.file.at = next, hash, now
	if len(changed) == 0 {
		r.log.Info("config reloaded: no key changed (token, certificate and fencing secrets read again)", "config_hash", hash)
	} else {
		r.log.Info("config reloaded", "changed", strings.Join(changed, ","), "config_hash", hash)
	}
	r.file.level.Set(p.logLevel) // last, so that the line above is logged at the old level
	return adminapi.ReloadAnswer{Applied: true, Changed: changed, Notes: notes}
}

// build makes every part next needs, reading its secret files and
// certificate; it changes nothing.
func (r *reloader) build(next *config.Config, hash string, now time.Time) (reloadParts, error) {
	var p reloadParts
	p.ccfg = controllerConfig(next)
	p.ccfg.ConfigHash, p.ccfg.ConfigLoadedAt = hash, now
	fence, err := buildFencer(next, r.log, r.metrics)
	if err != nil {
		return p, err
	}
	p.reload = controller.Reload{Config: p.ccfg, Hooks: procHooks(next, p.ccfg, r.log), Fencer: fence, Prover: proverOf(fence), Position: positionReader(next, r.log)}
	if p.checker, err = buildChecker(next); err != nil {
		return p, err
	}
	p.health = healthConfig(next)
	if p.token, err = next.ReadToken(); err != nil {
		return p, fmt.Errorf("node.admin.token_file: %w", err)
	}
	if t := next.Node.Admin.TLS; t != nil {
		cert, err := t.LoadCertificate()
		if err != nil {
			return p, fmt.Errorf("node.admin.tls: %w", err)
		}
		p.cert = &cert
	}
	p.logLevel = logLevel(next.Log.Level)
	return p, nil
}

// touches reports whether a path in changed starts with prefix.
func touches(changed []string, prefix string) bool {
	for _, c := range changed {
		if strings.HasPrefix(c, prefix) {
			return true
		}
	}
	return false
}

// reloadOnSignal reloads on every signal on hup until ctx ends; the
// outcome is in the log.
func (d *daemon) reloadOnSignal(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.hup:
			d.log.Info("SIGHUP: reloading the config file")
			d.reloader.Reload(ctx)
		}
	}
}
