package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/fencer"
	"github.com/failoverd/failoverd/internal/ids"
	"github.com/failoverd/failoverd/internal/secret"
)

// FieldError is one problem in a config file.
type FieldError struct {
	// Path is the YAML path of the offending key ("fencing.methods[1].ssh.port");
	// "" when the decoder could not tell.
	Path string
	// Line is the line in the file, when known (decoding errors), else 0.
	Line int
	// Msg says what is wrong.
	Msg string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	b.WriteString(e.Msg)
	if e.Path != "" && e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	return b.String()
}

// ValidationErrors lists every problem found in a config file, in file
// order as far as possible. Its Error has one problem per line.
type ValidationErrors []*FieldError

func (es ValidationErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap gives errors.As and errors.Is access to each *FieldError.
func (es ValidationErrors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}

// Validate checks c, including that the files it names exist, and returns a
// ValidationErrors listing every problem, or nil. Load and Parse apply the
// same checks. A Config built in Go counts as having a zookeeper block
// when its ZooKeeper differs from Default's.
func (c *Config) Validate() error { return c.validate(LoadOptions{}, written{backend: true}) }

type validator struct {
	opts LoadOptions
	errs ValidationErrors
}

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (c *Config) validate(opts LoadOptions, set written) error {
	v := &validator{opts: opts}

	v.name("cluster", c.Cluster)

	// node
	n := &c.Node
	v.name("node.id", n.ID)
	v.host("node.host", n.Host)
	if n.ServiceAddress != "" {
		v.serviceAddress("node.service_address", n.ServiceAddress)
	}
	if n.Priority < 0 {
		v.add("node.priority", "must be >= 0 (0: this node never leads), got %d", n.Priority)
	}
	v.hostPort("node.admin.listen", n.Admin.Listen, true)
	if n.Admin.AdvertiseURL != "" {
		v.adminURL("node.admin.advertise_url", n.Admin.AdvertiseURL)
	}
	if n.Admin.TokenFile != "" {
		v.secretFile("node.admin.token_file", n.Admin.TokenFile)
	}
	v.adminTLS(c) // tls.go
	v.timeout("node.shutdown_timeout", n.ShutdownTimeout)
	if n.StateDir == "" || !filepath.IsAbs(n.StateDir) {
		v.add("node.state_dir", "must be an absolute path, got %q", n.StateDir)
	}

	// coordination, zookeeper, etcd
	zkSet := set.zooKeeper || zooKeeperChanged(&c.ZooKeeper)
	v.coordination(c, set.backend, zkSet)
	sessionOK := false // no session timeout to check the lease against
	if zkSet {
		sessionOK = v.zooKeeper(&c.ZooKeeper)
	}

	// election
	switch c.Election.Mode {
	case ModeFair, ModeUnfair:
	default:
		v.add("election.mode", "%q is not one of %s, %s", c.Election.Mode, ModeFair, ModeUnfair)
	}
	if c.Election.TakeOverAtDeadline && c.Election.Mode == ModeUnfair && c.Coordination.Backend != BackendEtcd {
		v.add("election.take_over_at_deadline", "needs election.mode %s: in %s mode every standby races for one shared lock, so no single successor times the leader's heartbeat, and a lock created again cannot be told from the old one by its version",
			ModeFair, ModeUnfair)
	}
	v.fenceFirst(c, sessionOK)
	if zk := &c.ZooKeeper; zk.TickTime != 0 {
		v.duration("zookeeper.tick_time", zk.TickTime, time.Millisecond)
	}
	if c.Coordination.Backend != BackendEtcd {
		v.lease(c, sessionOK)
	}
	v.renewInterval(c, sessionOK)
	if d := c.Election.FailoverCooldown; d < 0 {
		v.add("election.failover_cooldown", "must not be negative (0 turns the cooldown off), got %s", fmtDur(time.Duration(d)))
	} else if d != 0 {
		v.duration("election.failover_cooldown", d, MinTimeout)
	}
	switch pa := c.Election.PreemptAfter; {
	case pa < 0:
		v.add("election.preempt_after", "must be >= 0 (0: never), got %s", fmtDur(time.Duration(pa)))
	case pa > 0:
		v.duration("election.preempt_after", pa, MinTimeout)
	}

	// health
	h := &c.Health
	v.timeout("health.interval", h.Interval)
	v.timeout("health.timeout", h.Timeout)
	v.notNegative("health.rise", h.Rise) // 0: healthcheck's default
	v.notNegative("health.fall", h.Fall)
	if count(h.HTTP != nil, h.TCP != nil, h.Exec != nil) != 1 {
		v.add("health", "exactly one of http, tcp, exec must be set")
	}
	if h.HTTP != nil {
		v.httpURL("health.http.url", h.HTTP.URL)
	}
	if h.TCP != nil {
		v.hostPort("health.tcp.address", h.TCP.Address, false)
	}
	if h.Exec != nil {
		v.command("health.exec.command", h.Exec.Command)
	}

	// service
	svc := &c.Service
	v.command("service.promote.command", svc.Promote.Command)
	v.timeout("service.promote.timeout", svc.Promote.Timeout)
	v.command("service.demote.command", svc.Demote.Command)
	demoteOK := v.timeout("service.demote.timeout", svc.Demote.Timeout)
	key := "service.demote.timeout"
	if g := svc.Demote.GracefulTimeout; g != nil {
		// Not part of the demote budget: the leader keeps renewing its
		// term while a graceful demote runs (controller/graceful.go).
		key = "service.demote.graceful_timeout"
		switch {
		case !v.timeout(key, *g):
			demoteOK = false
		case demoteOK && *g < svc.Demote.Timeout:
			v.add(key, "%s is shorter than service.demote.timeout (%s); a graceful demote may take at least as long as a forced one",
				fmtDur(time.Duration(*g)), fmtDur(time.Duration(svc.Demote.Timeout)))
			demoteOK = false
		}
	}
	if demote := svc.Demote.Graceful() + controller.KillGrace; demoteOK && n.ShutdownTimeout > 0 && time.Duration(n.ShutdownTimeout) < demote {
		// At start and on every reload: the fixed default does not grow
		// with a raised graceful timeout, so an unset key is named as such.
		unset := ""
		if !set.shutdownTimeout {
			unset = " (the default: the key is not set)"
		}
		v.add("node.shutdown_timeout", "%s%s is shorter than %s plus its kill grace (%s); a graceful stop must leave time to demote: set node.shutdown_timeout to at least %s",
			fmtDur(time.Duration(n.ShutdownTimeout)), unset, key, fmtDur(demote), fmtDur(demote))
	}

	if p := svc.PrePromote; p != nil {
		v.command("service.pre_promote.command", p.Command)
		v.timeout("service.pre_promote.timeout", p.Timeout)
	}
	if f := svc.Follow; f != nil {
		v.command("service.follow.command", f.Command)
		v.timeout("service.follow.timeout", f.Timeout)
		if d := f.NoLeaderAfter; d != nil && *d < 0 {
			v.add("service.follow.no_leader_after", "must not be negative (0 never runs the hook without a leader), got %s", fmtDur(time.Duration(*d)))
		} else if d != nil && *d != 0 {
			v.duration("service.follow.no_leader_after", *d, MinTimeout)
		}
	}

	v.position(c)

	// fencing
	if len(c.Fencing.Methods) == 0 && !c.Fencing.AllowNone {
		v.add("fencing.methods", "no fencing method configured; set fencing.allow_none: true to run without fencing (unsafe)")
	}
	for i, m := range c.Fencing.Methods {
		p := fmt.Sprintf("fencing.methods[%d]", i)
		if count(m.RPC != nil, m.SSH != nil, m.Shell != nil) != 1 {
			v.add(p, "exactly one of rpc, ssh, shell must be set")
		}
		if m.RPC != nil {
			v.rpc(p+".rpc", m.RPC, c.Node.Admin.TokenFile)
		}
		if m.SSH != nil {
			v.ssh(p+".ssh", m.SSH)
		}
		if m.Shell != nil {
			v.command(p+".shell.command", m.Shell.Command)
			v.timeout(p+".shell.timeout", m.Shell.Timeout)
		}
	}

	// log
	switch c.Log.Format {
	case LogFormatText, LogFormatJSON:
	default:
		v.add("log.format", "%q is not one of text, json", c.Log.Format)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		v.add("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}

	if len(v.errs) == 0 {
		return nil
	}
	return v.errs
}

// fenceFirst checks election.suspect_after, and election.fence_first
// against the election mode, the expiry it must beat and the fencing
// methods it fences with. sessionOK says whether
// zookeeper.session_timeout is valid.
func (v *validator) fenceFirst(c *Config, sessionOK bool) {
	const p, ps = "election.fence_first", "election.suspect_after"
	e := &c.Election
	suspectOK := v.duration(ps, e.SuspectAfter, MinTimeout)
	if !e.FenceFirst {
		return
	}
	if e.Mode == ModeUnfair {
		v.add(p, "needs election.mode %s: in %s mode every standby races for the leadership, so no single successor times the leader's heartbeat and ends its term",
			ModeFair, ModeUnfair)
	}
	if suspectOK {
		// Expiry ends a silent leader's term after the session timeout or
		// the lease TTL anyway: a leader suspected no sooner (its
		// heartbeat overdue by suspect_after beyond the renew interval it
		// publishes) is never fenced first.
		expiry, key := time.Duration(0), ""
		switch {
		case c.Coordination.Backend == BackendEtcd && c.Etcd != nil && c.Etcd.LeaseTTL > 0:
			expiry, key = c.Etcd.LeaseTTL.Std(), "etcd.lease_ttl"
		case c.Coordination.Backend == BackendZooKeeper && sessionOK:
			expiry, key = c.ZooKeeper.SessionTimeout.Std(), "zookeeper.session_timeout"
		}
		s := e.SuspectAfter.Std()
		renew, renewOK := c.renewInterval()
		if !renewOK {
			renew = 0
		}
		// A renew interval not shorter than the expiry is the timing
		// check's to refuse.
		if key != "" && renew < expiry && renew+s >= expiry {
			if renewOK {
				v.add(ps, "%s plus the leader's renew interval %s is %s, not shorter than %s (%s): expiry would end a silent leader's term before its heartbeat is overdue, so fencing first could never act; set election.suspect_after below %s",
					fmtDur(s), fmtDur(renew), fmtDur(renew+s), key, fmtDur(expiry), fmtDur(expiry-renew))
			} else {
				v.add(ps, "%s is not shorter than %s (%s): expiry would end a silent leader's term before it is suspected, so fencing first could never act; set election.suspect_after below %s",
					fmtDur(s), key, fmtDur(expiry), fmtDur(expiry))
			}
		}
	}
	proving := 0
	for _, m := range c.Fencing.Methods {
		if m.Proving() {
			proving++
		}
	}
	switch {
	case len(c.Fencing.Methods) == 0 && c.Fencing.AllowNone:
		v.add(p, "needs a fencing method that proves the leader cannot act, and fencing.allow_none runs without any: fencing first would end a live leader's term")
	case proving == 0:
		none := "no fencing method is configured"
		if n := len(c.Fencing.Methods); n > 0 {
			none = fmt.Sprintf("none of the %d configured does", n)
		}
		v.add(p, "needs a fencing method that proves the leader cannot act (fencing.methods[N].proves): an rpc method proves unless proves: false, an ssh or shell method only with proves: true, "+
			"which its command earns by verifying the target is stopped before it exits 0; %s", none)
	}
}

// coordination checks coordination.backend, and that the block of the
// backend it names is set and the block of another backend is not; it
// checks the etcd block when that backend is chosen. backendSet says
// whether the file sets the backend (else it is the default), zkSet
// whether it has a zookeeper block.
func (v *validator) coordination(c *Config, backendSet, zkSet bool) {
	const p = "coordination.backend"
	b := c.Coordination.Backend
	why := "coordination.backend is " + b
	if !backendSet {
		why += " (the default)"
	}
	switch b {
	case BackendZooKeeper:
		if !zkSet {
			v.add("zookeeper", "missing: %s", why)
		}
		if c.Etcd != nil {
			v.add("etcd", "set, but coordination.backend is %s (remove the block or change the backend)", b)
		}
	case BackendEtcd:
		if zkSet {
			v.add("zookeeper", "set, but coordination.backend is %s (remove the block or change the backend)", b)
		}
		if c.Etcd == nil {
			v.add("etcd", "missing: %s", why)
		} else {
			v.etcd(c) // etcd.go
		}
		if c.Election.Lease != 0 {
			v.add("election.lease", "applies to the zookeeper backend only; with etcd a leader's lease follows etcd.lease_ttl (remove election.lease)")
		}
	default:
		v.add(p, "%q is not one of %s", b, strings.Join(supportedBackends, ", "))
	}
}

// zooKeeperChanged reports whether zk differs from Default's, which a
// Config built in Go without a zookeeper block keeps.
func zooKeeperChanged(zk *ZooKeeper) bool {
	d := Default().ZooKeeper
	return len(zk.Servers) > 0 || zk.Root != d.Root || zk.SessionTimeout != d.SessionTimeout || zk.TickTime != d.TickTime || zk.Auth != nil
}

// zooKeeper checks the zookeeper block, and reports whether its session
// timeout is valid (the lease is checked against it).
func (v *validator) zooKeeper(zk *ZooKeeper) (sessionOK bool) {
	if len(zk.Servers) == 0 {
		v.add("zookeeper.servers", "required: list the ensemble as host:port")
	}
	seen := map[string]int{}
	for i, s := range zk.Servers {
		p := fmt.Sprintf("zookeeper.servers[%d]", i)
		if v.hostPort(p, s, false) {
			if j, dup := seen[s]; dup {
				v.add(p, "%q repeats zookeeper.servers[%d]", s, j)
			}
			seen[s] = i
		}
	}
	v.root("zookeeper.root", zk.Root)
	sessionOK = v.duration("zookeeper.session_timeout", zk.SessionTimeout, MinSessionTimeout)
	if a := zk.Auth; a != nil {
		if a.Scheme != AuthSchemeDigest {
			v.add("zookeeper.auth.scheme", "%q is not supported; use %q", a.Scheme, AuthSchemeDigest)
		}
		if a.CredentialsFile == "" {
			v.add("zookeeper.auth.credentials_file", "required when zookeeper.auth is set (a file holding user:password)")
		} else {
			v.secretFile("zookeeper.auth.credentials_file", a.CredentialsFile)
		}
	}
	if t := zk.TLS; t != nil {
		v.clientTLS("zookeeper.tls", t)
	}
	return sessionOK
}

// position checks service.position and election.max_lag, which compares
// the positions it prints and means nothing without it.
func (v *validator) position(c *Config) {
	if p := c.Service.Position; p != nil {
		v.command("service.position.command", p.Command)
		intervalOK := v.timeout("service.position.interval", p.Interval)
		if v.timeout("service.position.timeout", p.Timeout) && intervalOK && p.Timeout > p.Interval {
			v.add("service.position.timeout", "%s is longer than service.position.interval (%s): runs would overlap",
				fmtDur(time.Duration(p.Timeout)), fmtDur(time.Duration(p.Interval)))
		}
	}
	switch lag := c.Election.MaxLag; {
	case lag == nil:
	case *lag < 0:
		v.add("election.max_lag", "must be >= 0 (0: a candidate must hold everything the leader last published), got %d", *lag)
	case c.Service.Position == nil:
		v.add("election.max_lag", "needs service.position: the lag is measured in the positions that command prints")
	}
}

func (v *validator) rpc(p string, r *RPCFencing, adminTokenFile string) {
	if r.URL != "" {
		v.adminURL(p+".url", r.URL)
	}
	switch {
	case r.TokenFile != "":
		v.secretFile(p+".token_file", r.TokenFile)
	case adminTokenFile == "":
		v.add(p+".token_file", "required: the old leader's admin API accepts /v1/demote only with its token; set it here or in node.admin.token_file")
	}
	if r.Timeout != 0 { // 0: fencer's default
		v.timeout(p+".timeout", r.Timeout)
	}
	v.rpcTransport(p, r) // tls.go
}

func (v *validator) ssh(p string, s *SSHFencing) {
	if s.User == "" {
		v.add(p+".user", "required")
	}
	if s.Port != 0 { // 0: fencer's default
		v.port(p+".port", s.Port)
	}
	switch {
	case s.IdentityFile != "" && len(s.IdentityFiles) > 0:
		v.add(p, "set identity_file or identity_files, not both")
	case s.IdentityFile == "" && len(s.IdentityFiles) == 0 && !s.UseAgent:
		v.add(p, "no authentication configured; set identity_file, identity_files or use_agent: true")
	}
	if s.IdentityFile != "" {
		v.secretFile(p+".identity_file", s.IdentityFile)
	}
	for i, f := range s.IdentityFiles {
		q := fmt.Sprintf("%s.identity_files[%d]", p, i)
		if f == "" {
			v.add(q, "must not be empty")
		} else {
			v.secretFile(q, f)
		}
	}
	switch {
	case s.KnownHosts != "" && s.InsecureIgnoreHostKey:
		v.add(p, "set known_hosts or insecure_ignore_host_key, not both")
	case s.KnownHosts != "":
		v.file(p+".known_hosts", s.KnownHosts)
	case !s.InsecureIgnoreHostKey:
		v.add(p+".known_hosts", "required: host keys are verified against an OpenSSH known_hosts file (insecure_ignore_host_key: true is for tests only)")
	}
	connectOK := s.ConnectTimeout != 0 && v.timeout(p+".connect_timeout", s.ConnectTimeout) // 0: fencer's default
	if v.timeout(p+".timeout", s.Timeout) && connectOK && s.ConnectTimeout > s.Timeout {
		v.add(p+".connect_timeout", "%s exceeds %s.timeout (%s)", fmtDur(time.Duration(s.ConnectTimeout)), p, fmtDur(time.Duration(s.Timeout)))
	}
	switch {
	case (s.Command != "") == (s.KillPort != 0):
		v.add(p, "exactly one of command, kill_port must be set")
	case s.KillPort != 0:
		v.port(p+".kill_port", s.KillPort)
	}
	if s.Command != "" && strings.TrimSpace(s.Command) == "" {
		v.add(p+".command", "must not be blank")
	}
}

func count(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// name checks a cluster name or node id, by the rule the breadcrumb's
// reader applies to the node id it finds (internal/ids).
func (v *validator) name(p, s string) {
	if err := ids.CheckName(s); err != nil {
		if s == "" {
			v.add(p, "required")
			return
		}
		v.add(p, "%q is not a valid name: %v", s, err)
	}
}

func validHost(h string) bool { return ids.ValidHost(h) }

func (v *validator) host(p, h string) {
	switch {
	case h == "":
		v.add(p, "required")
	case !validHost(h):
		v.add(p, "%q is not a host name or IP address", h)
	}
}

// hostPort checks host:port; an empty host is allowed only if emptyHost
// (listen on every interface). It reports whether s is valid.
func (v *validator) hostPort(p, s string, emptyHost bool) bool {
	host, port, err := net.SplitHostPort(s)
	switch {
	case s == "":
		v.add(p, "required")
		return false
	case err != nil:
		v.add(p, "%q is not host:port", s)
		return false
	case host == "" && !emptyHost:
		v.add(p, "%q has no host", s)
		return false
	case host != "" && !validHost(host):
		v.add(p, "%q: %q is not a host name or IP address", s, host)
		return false
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		v.add(p, "%q: port must be a number from 1 to 65535", s)
		return false
	}
	return true
}

// serviceAddress checks node.service_address: it travels in the
// breadcrumb, whose readers apply the same rule (internal/ids), and into
// hooks' environments.
func (v *validator) serviceAddress(p, s string) {
	if err := ids.CheckHostPort(s); err != nil {
		v.add(p, "%q: %v", s, err)
	}
}

func (v *validator) port(p string, n int) {
	if n < 1 || n > 65535 {
		v.add(p, "must be from 1 to 65535, got %d", n)
	}
}

func (v *validator) httpURL(p, s string) {
	u, err := url.Parse(s)
	switch {
	case s == "":
		v.add(p, "required")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		v.add(p, "%q is not an http or https URL", s)
	}
}

// adminURL checks a URL of a failoverd admin API: it is published in the
// breadcrumb, whose readers apply the same rule (internal/ids).
func (v *validator) adminURL(p, s string) {
	if err := ids.CheckHTTPURL(s); err != nil {
		if s == "" {
			v.add(p, "required")
			return
		}
		v.add(p, "%q is not an http or https URL: %v", s, err)
	}
}

func (v *validator) root(p, s string) {
	switch {
	case s == "":
		v.add(p, "required")
	case s == "/":
		v.add(p, "must not be \"/\"; use a dedicated prefix such as %s", DefaultRoot)
	case !strings.HasPrefix(s, "/"):
		v.add(p, "%q must be an absolute znode path (start with /)", s)
	case strings.HasSuffix(s, "/"):
		v.add(p, "%q must not end with /", s)
	default:
		for seg := range strings.SplitSeq(s[1:], "/") {
			if seg == "" || seg == "." || seg == ".." || strings.ContainsFunc(seg, func(r rune) bool {
				return r < 0x20 || r == 0x7f || (r >= 0xd800 && r <= 0xf8ff) || r >= 0xfff0
			}) {
				v.add(p, "%q is not a valid znode path", s)
				return
			}
		}
		if s == "/zookeeper" || strings.HasPrefix(s, "/zookeeper/") {
			v.add(p, "%q is reserved by ZooKeeper", s)
		}
	}
}

// duration checks min <= d <= MaxDuration and reports whether it is.
func (v *validator) duration(p string, d Duration, min time.Duration) bool {
	switch td := time.Duration(d); {
	case td <= 0:
		v.add(p, "must be > 0, got %s", fmtDur(td))
	case td < min:
		v.add(p, "must be at least %s, got %s", fmtDur(min), fmtDur(td))
	case td > MaxDuration:
		v.add(p, "must be at most %s, got %s", fmtDur(MaxDuration), fmtDur(td))
	default:
		return true
	}
	return false
}

// timeout checks a timeout or interval (MinTimeout to MaxDuration).
func (v *validator) timeout(p string, d Duration) bool { return v.duration(p, d, MinTimeout) }

// lease checks election.lease, zookeeper.session_timeout,
// zookeeper.tick_time and service.demote.timeout together: the ranges
// here, then the ZooKeeper backend's timing check (SetTimingChecks), which
// applies the elector's rule to the configured values. When
// service.demote.timeout is not valid (reported on its own), the check
// gets 0 for it and can only check the lease against the session timeout.
func (v *validator) lease(c *Config, sessionOK bool) {
	const p = "election.lease"
	l := time.Duration(c.Election.Lease)
	tick := time.Duration(c.ZooKeeper.TickTime)
	demote := time.Duration(c.Service.Demote.Timeout)
	switch {
	case l < 0:
		v.add(p, "must be 0 (the longest that fits) or positive, got %s", fmtDur(l))
		return
	case l > 0 && l < MinLease:
		v.add(p, "%s is shorter than the minimum %s; a leader renews its lease with round trips to the ZooKeeper leader and could not keep a shorter one",
			fmtDur(l), fmtDur(MinLease))
		return
	case !sessionOK || tick < 0 || tick > MaxDuration:
		return
	}
	t := c.Timing()
	if demote <= 0 || demote > MaxDuration {
		t.DemoteTimeout, t.DemoteBudget = 0, 0
	}
	v.checkTiming(BackendZooKeeper, t)
}

// renewInterval checks election.renew_interval: 0 (derived), or from
// MinRenewInterval to the interval the backend derives (its renew
// interval with the key at 0, SetRenewIntervals), and one the backend
// applies as configured: ZooKeeper renews no faster than tickTime/2 +
// 5%, which is also what it derives. Longer intervals are what the lease
// arithmetic forbids. The comparison waits for valid timing settings
// (each reported on its own) and needs the backend's wiring.
func (v *validator) renewInterval(c *Config, sessionOK bool) {
	const p = "election.renew_interval"
	r := c.Election.RenewInterval.Std()
	switch {
	case r == 0:
		return
	case r < 0:
		v.add(p, "must be 0 (the interval the backend derives) or positive, got %s", fmtDur(r))
		return
	case r < MinRenewInterval:
		v.add(p, "%s is shorter than the minimum %s: every candidate renews at that rate", fmtDur(r), fmtDur(MinRenewInterval))
		return
	}
	switch c.Coordination.Backend {
	case BackendZooKeeper:
		if tick := c.ZooKeeper.TickTime.Std(); !sessionOK || tick < 0 || tick > MaxDuration {
			return
		}
	case BackendEtcd:
		if c.Etcd == nil || c.Etcd.LeaseTTL <= 0 {
			return
		}
	default:
		return
	}
	derived, ok := c.derivedRenewInterval()
	if !ok {
		return
	}
	how := "ZooKeeper: tickTime/2 + 5%"
	if c.Coordination.Backend == BackendEtcd {
		how = "etcd: min(etcd.lease_ttl/3, 1s)"
	}
	if r > derived {
		v.add(p, "%s is longer than the renew interval the backend derives, %s (%s): the lease arithmetic counts on renewals at least that often; "+
			"set at most %s, or 0 for the derived interval", fmtDur(r), fmtDur(derived), how, fmtDur(derived))
		return
	}
	if got, _ := c.renewInterval(); got != r {
		v.add(p, "%s is shorter than ZooKeeper allows: a leader's renewals prove its session alive only when sent at least tickTime/2 + 5%% apart (%s), "+
			"so the elector would renew every %s whatever is set here; set 0 (or %s), and a shorter zookeeper.tick_time (on the servers too) for faster renewals",
			fmtDur(r), fmtDur(got), fmtDur(got), fmtDur(got))
	}
}

func (v *validator) notNegative(p string, n int) {
	if n < 0 {
		v.add(p, "must not be negative, got %d", n)
	}
}

// command checks an argv; the program must exist when named by absolute path.
func (v *validator) command(p string, argv []string) {
	if len(argv) == 0 {
		v.add(p, "required: the argv to run, such as [/usr/local/bin/promote, --fast]")
		return
	}
	prog := argv[0]
	if strings.TrimSpace(prog) == "" {
		v.add(p+"[0]", "must name a program")
		return
	}
	if v.opts.SkipFileChecks || !strings.HasPrefix(prog, "/") {
		return
	}
	fi, err := os.Stat(prog)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		msg := "file not found: " + prog
		if strings.ContainsAny(prog, " \t") && len(argv) == 1 {
			msg += " (the command is a list: write [/path/to/prog, arg], not one string)"
		}
		v.add(p+"[0]", "%s", msg)
	case err != nil:
		v.add(p+"[0]", "%s", fileErr(err))
	case fi.IsDir():
		v.add(p+"[0]", "is a directory: %s", prog)
	case fi.Mode()&0o111 == 0:
		v.add(p+"[0]", "is not executable: %s", prog)
	}
}

// file checks that a file referenced by the config can be read, and
// reports whether it can (or file checks are off).
func (v *validator) file(p, name string) bool {
	if v.opts.SkipFileChecks {
		return true
	}
	fi, err := os.Stat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		v.add(p, "file not found: %s", name)
		return false
	case err != nil:
		v.add(p, "%s", fileErr(err))
		return false
	case fi.IsDir():
		v.add(p, "is a directory: %s", name)
		return false
	}
	f, err := os.Open(name)
	if err != nil {
		v.add(p, "%s", fileErr(err))
		return false
	}
	f.Close()
	return true
}

// secretFile checks a file that holds a secret (token, credentials, private
// key): it must be readable, and only by its owner, as internal/secret
// requires when the daemon reads it.
func (v *validator) secretFile(p, name string) {
	if !v.file(p, name) || v.opts.SkipFileChecks {
		return
	}
	if err := secret.Check(name); err != nil {
		v.add(p, "%v", err)
	}
}

// fileErr words an *fs.PathError as "cannot read /x: permission denied".
func fileErr(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Sprintf("cannot read %s: %v", pe.Path, pe.Err)
	}
	return err.Error()
}

// fmtDur rounds to the millisecond for messages ("3.333s").
func fmtDur(d time.Duration) string {
	if d >= time.Millisecond || d <= -time.Millisecond {
		d = d.Round(time.Millisecond)
	}
	return d.String()
}

// rpcTimeoutWarnings: an rpc fencer waits for the old leader's demote
// hook, which may take up to service.demote.timeout (every node is
// assumed to run the same service section). A call that gives up sooner
// fails although the demote may still succeed, and the next method (often
// a harsher one) runs. One warning per rpc method whose timeout, set or
// the fencer's default, is shorter.
func (c *Config) rpcTimeoutWarnings() []string {
	demote := time.Duration(c.Service.Demote.Timeout)
	var w []string
	for i, m := range c.Fencing.Methods {
		if m.RPC == nil {
			continue
		}
		rpc, dflt := time.Duration(m.RPC.Timeout), ""
		if rpc == 0 {
			rpc, dflt = fencer.DefaultRPCTimeout, " (the default)"
		}
		if rpc >= demote {
			continue
		}
		p := fmt.Sprintf("fencing.methods[%d].rpc.timeout", i)
		w = append(w, fmt.Sprintf("%s: %s%s is shorter than service.demote.timeout %s: the rpc call waits for the old leader's demote hook "+
			"and gives up before a slow demote ends, so rpc fencing fails (the next method runs) although the demote may still succeed; "+
			"set %s to service.demote.timeout or more",
			p, fmtDur(rpc), dflt, fmtDur(demote), p))
	}
	return w
}
