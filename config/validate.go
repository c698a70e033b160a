package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
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
// ValidationErrors listing every problem, or nil. Load and Parse call it.
func (c *Config) Validate() error { return c.validate(LoadOptions{}) }

type validator struct {
	opts LoadOptions
	errs ValidationErrors
}

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func (c *Config) validate(opts LoadOptions) error {
	v := &validator{opts: opts}

	v.name("cluster", c.Cluster)

	// node
	n := &c.Node
	v.name("node.id", n.ID)
	v.host("node.host", n.Host)
	v.hostPort("node.admin.listen", n.Admin.Listen, true)
	if n.Admin.AdvertiseURL != "" {
		v.httpURL("node.admin.advertise_url", n.Admin.AdvertiseURL)
	}
	if n.Admin.TokenFile != "" {
		v.file("node.admin.token_file", n.Admin.TokenFile)
	}
	v.adminTLS(c) // tls.go
	v.positive("node.shutdown_timeout", n.ShutdownTimeout)

	// zookeeper
	zk := &c.ZooKeeper
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
	session := time.Duration(zk.SessionTimeout)
	sessionOK := session >= MinSessionTimeout
	if !sessionOK {
		v.add("zookeeper.session_timeout", "must be at least %s, got %s", MinSessionTimeout, fmtDur(session))
	}
	if a := zk.Auth; a != nil {
		if a.Scheme != AuthSchemeDigest {
			v.add("zookeeper.auth.scheme", "%q is not supported; use %q", a.Scheme, AuthSchemeDigest)
		}
		if a.CredentialsFile == "" {
			v.add("zookeeper.auth.credentials_file", "required when zookeeper.auth is set (a file holding user:password)")
		} else {
			v.file("zookeeper.auth.credentials_file", a.CredentialsFile)
		}
	}

	// election
	switch c.Election.Mode {
	case ModeFair, ModeUnfair:
	default:
		v.add("election.mode", "%q is not one of %s, %s", c.Election.Mode, ModeFair, ModeUnfair)
	}
	lease := time.Duration(c.Election.Lease)
	leaseOK := true
	switch {
	case lease < 0:
		v.add("election.lease", "must be 0 (2/3 of the session timeout) or positive, got %s", fmtDur(lease))
		leaseOK = false
	case lease > 0 && sessionOK && lease >= session:
		v.add("election.lease", "%s must be shorter than zookeeper.session_timeout (%s); a leader must step down before its session can expire",
			fmtDur(lease), fmtDur(session))
		leaseOK = false
	}

	// health
	h := &c.Health
	v.positive("health.interval", h.Interval)
	v.positive("health.timeout", h.Timeout)
	v.atLeastOne("health.rise", h.Rise)
	v.atLeastOne("health.fall", h.Fall)
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
	v.command("service.promote.command", c.Service.Promote.Command)
	v.positive("service.promote.timeout", c.Service.Promote.Timeout)
	v.command("service.demote.command", c.Service.Demote.Command)
	demote := time.Duration(c.Service.Demote.Timeout)
	if v.positive("service.demote.timeout", c.Service.Demote.Timeout) && sessionOK && leaseOK {
		eff := c.EffectiveLease()
		leaseDesc := fmt.Sprintf("election.lease (%s)", fmtDur(eff))
		if lease == 0 {
			leaseDesc = fmt.Sprintf("the lease (%s, 2/3 of the session timeout)", fmtDur(eff))
		}
		if room := session - eff; demote > room {
			v.add("service.demote.timeout", "%s exceeds zookeeper.session_timeout (%s) minus %s = %s; "+
				"the old leader's demote must finish before a successor can be elected",
				fmtDur(demote), fmtDur(session), leaseDesc, fmtDur(room))
		}
	}
	if n.ShutdownTimeout > 0 && demote > 0 && time.Duration(n.ShutdownTimeout) < demote {
		v.add("node.shutdown_timeout", "%s is shorter than service.demote.timeout (%s); a graceful stop must leave time to demote",
			fmtDur(time.Duration(n.ShutdownTimeout)), fmtDur(demote))
	}

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
			v.rpc(p+".rpc", m.RPC)
		}
		if m.SSH != nil {
			v.ssh(p+".ssh", m.SSH)
		}
		if m.Shell != nil {
			v.command(p+".shell.command", m.Shell.Command)
			v.positive(p+".shell.timeout", m.Shell.Timeout)
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

func (v *validator) rpc(p string, r *RPCFencing) {
	if r.URL != "" {
		v.httpURL(p+".url", r.URL)
	}
	if r.TokenFile == "" {
		v.add(p+".token_file", "required: the old leader's admin API accepts /v1/demote only with its token; set it here or in node.admin.token_file")
	} else {
		v.file(p+".token_file", r.TokenFile)
	}
	v.positive(p+".timeout", r.Timeout)
	v.rpcTransport(p, r) // tls.go
}

func (v *validator) ssh(p string, s *SSHFencing) {
	if s.User == "" {
		v.add(p+".user", "required")
	}
	v.port(p+".port", s.Port)
	switch {
	case s.IdentityFile != "" && len(s.IdentityFiles) > 0:
		v.add(p, "set identity_file or identity_files, not both")
	case s.IdentityFile == "" && len(s.IdentityFiles) == 0 && !s.UseAgent:
		v.add(p, "no authentication configured; set identity_file, identity_files or use_agent: true")
	}
	if s.IdentityFile != "" {
		v.file(p+".identity_file", s.IdentityFile)
	}
	for i, f := range s.IdentityFiles {
		q := fmt.Sprintf("%s.identity_files[%d]", p, i)
		if f == "" {
			v.add(q, "must not be empty")
		} else {
			v.file(q, f)
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
	connectOK := v.positive(p+".connect_timeout", s.ConnectTimeout)
	if v.positive(p+".timeout", s.Timeout) && connectOK && s.ConnectTimeout > s.Timeout {
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

func (v *validator) name(p, s string) {
	switch {
	case s == "":
		v.add(p, "required")
	case !nameRE.MatchString(s):
		v.add(p, "%q is not a valid name: use letters, digits, '.', '_' and '-'", s)
	case s == "." || s == "..":
		v.add(p, "%q is not a valid name", s)
	}
}

var hostnameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\.?$`)

func validHost(h string) bool {
	return net.ParseIP(h) != nil || (len(h) <= 253 && hostnameRE.MatchString(h))
}

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

// positive checks d > 0 and reports whether it is.
func (v *validator) positive(p string, d Duration) bool {
	if d <= 0 {
		v.add(p, "must be > 0, got %s", fmtDur(time.Duration(d)))
		return false
	}
	return true
}

func (v *validator) atLeastOne(p string, n int) {
	if n < 1 {
		v.add(p, "must be at least 1, got %d", n)
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

// file checks that a file referenced by the config can be read.
func (v *validator) file(p, name string) {
	if v.opts.SkipFileChecks {
		return
	}
	fi, err := os.Stat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		v.add(p, "file not found: %s", name)
		return
	case err != nil:
		v.add(p, "%s", fileErr(err))
		return
	case fi.IsDir():
		v.add(p, "is a directory: %s", name)
		return
	}
	f, err := os.Open(name)
	if err != nil {
		v.add(p, "%s", fileErr(err))
		return
	}
	f.Close()
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
