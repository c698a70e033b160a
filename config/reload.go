package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// A reload (SIGHUP, failoverd reload) re-reads the whole file with Load and
// applies it all or nothing: when any changed key is refused, nothing is
// applied and the daemon keeps the config it runs. ReloadRules says, for
// every key, which way it goes.

// Reload says whether a key may change while the daemon runs.
type Reload int

const (
	// Reloadable keys take effect on reload.
	Reloadable Reload = iota + 1
	// Restart keys are refused by a reload: a restart applies them.
	Restart
)

// ReloadRule is one row of ReloadRules.
type ReloadRule struct {
	// Path is the key's YAML path; "[]" stands for any list index. An
	// optional block (a pointer in Config) has a row of its own, for the
	// block being added or removed, besides the rows of its keys.
	Path   string
	Reload Reload
	// Note says, for a Restart key, why it needs a restart; for a
	// Reloadable one, when it takes effect when that is not at once.
	Note string
}

// Reasons shared by many rows.
const (
	noteIdentity    = "it names this node or its cluster in the coordination service and in the records peers read"
	noteCoordSess   = "the coordination client and its session are set up at start"
	noteLease       = "the lease arithmetic and the elector are set up at start"
	notePublished   = "peers read it from the member record and the breadcrumb"
	noteNextHook    = "applies from the hook's next run; a run in progress finishes with the old settings"
	noteNextFence   = "applies from the next fence; a fence in progress finishes with the old methods"
	noteNextCheck   = "applies from the next check; a check in progress finishes with the old settings"
	noteNextPromote = "applies from the next promotion"
)

// ReloadRules classifies every key of the file (TestReloadRulesCoverConfig
// fails when a key has no row, so that a new key forces a decision).
var ReloadRules = []ReloadRule{
	{"cluster", Restart, noteIdentity},
	{"node.id", Restart, noteIdentity},
	{"node.host", Restart, notePublished},
	{"node.service_address", Restart, notePublished},
	{"node.priority", Reloadable, "a leader set to 0 hands its leadership over gracefully; a standby updates its member record"},
	{"node.shutdown_timeout", Reloadable, ""},
	{"node.state_dir", Restart, "the node's memory of its cluster is read at start"},
	{"node.admin.listen", Restart, "the admin API's socket is bound at start"},
	{"node.admin.advertise_url", Restart, notePublished},
	{"node.admin.token_file", Reloadable, "the token file is read again on every reload"},
	{"node.admin.tls", Restart, "adding or removing it changes the admin URL peers use (http or https)"},
	{"node.admin.tls.cert_file", Reloadable, "the certificate and key are read again on every reload and served to new connections"},
	{"node.admin.tls.key_file", Reloadable, "the certificate and key are read again on every reload and served to new connections"},

	{"coordination.backend", Restart, noteCoordSess},
	{"zookeeper.servers", Restart, noteCoordSess},
	{"zookeeper.root", Restart, noteIdentity},
	{"zookeeper.session_timeout", Restart, noteLease},
	{"zookeeper.tick_time", Restart, noteLease},
	{"zookeeper.auth", Restart, noteCoordSess},
	{"zookeeper.auth.scheme", Restart, noteCoordSess},
	{"zookeeper.auth.credentials_file", Restart, noteCoordSess},
	{"zookeeper.tls", Restart, noteCoordSess},
	{"zookeeper.tls.ca_file", Restart, noteCoordSess},
	{"zookeeper.tls.cert_file", Restart, noteCoordSess},
	{"zookeeper.tls.key_file", Restart, noteCoordSess},
	{"etcd", Restart, noteCoordSess},
	{"etcd.endpoints", Restart, noteCoordSess},
	{"etcd.prefix", Restart, noteIdentity},
	{"etcd.lease_ttl", Restart, noteLease},
	{"etcd.dial_timeout", Restart, noteCoordSess},
	{"etcd.tls", Restart, noteCoordSess},
	{"etcd.tls.ca_file", Restart, noteCoordSess},
	{"etcd.tls.cert_file", Restart, noteCoordSess},
	{"etcd.tls.key_file", Restart, noteCoordSess},
	{"etcd.username", Restart, noteCoordSess},
	{"etcd.password_file", Restart, noteCoordSess},

	{"election.mode", Restart, "every node of a cluster must run the same mode, which the cluster record holds"},
	{"election.lease", Restart, noteLease},
	{"election.warm_standby", Restart, noteLease},
	{"election.max_lag", Reloadable, "applies from the next election won"},
	{"election.failover_cooldown", Reloadable, noteNextPromote},
	{"election.preempt_after", Reloadable, ""},
	{"election.end_own_term_on_restart", Restart, "a restart reads the node state file and takes the lock beside it"},
	{"election.take_over_at_deadline", Restart, "every renewal of the elector, built at start, becomes a heartbeat"},
	{"election.fence_first", Restart, "every renewal of the elector, built at start, becomes a heartbeat, and the elector is given the proving fence"},
	{"election.suspect_after", Restart, "the elector, built at start, times the leader's heartbeat with it"},
	{"election.renew_interval", Restart, "the elector and its session, built at start, renew at it"},

	{"health.interval", Reloadable, noteNextCheck},
	{"health.timeout", Reloadable, noteNextCheck},
	{"health.rise", Reloadable, noteNextCheck},
	{"health.fall", Reloadable, noteNextCheck},
	{"health.http", Reloadable, noteNextCheck},
	{"health.http.url", Reloadable, noteNextCheck},
	{"health.http.expect_body", Reloadable, noteNextCheck},
	{"health.tcp", Reloadable, noteNextCheck},
	{"health.tcp.address", Reloadable, noteNextCheck},
	{"health.exec", Reloadable, noteNextCheck},
	{"health.exec.command", Reloadable, noteNextCheck},

	{"service.promote.command", Reloadable, noteNextHook},
	{"service.promote.timeout", Reloadable, noteNextHook},
	{"service.demote.command", Reloadable, noteNextHook},
	{"service.demote.timeout", Reloadable, noteNextHook + "; it may not be raised above its value at start (the lease was sized for that demote budget)"},
	{"service.demote.graceful_timeout", Reloadable, noteNextHook},
	{"service.pre_promote", Reloadable, noteNextPromote},
	{"service.pre_promote.command", Reloadable, noteNextHook},
	{"service.pre_promote.timeout", Reloadable, noteNextHook},
	{"service.follow", Restart, "adding or removing the follow hook starts or stops the leader watch, set up at start"},
	{"service.follow.command", Reloadable, noteNextHook},
	{"service.follow.timeout", Reloadable, noteNextHook},
	{"service.follow.no_leader_after", Reloadable, ""},
	{"service.position", Restart, "adding or removing the position command starts or stops its reader, set up at start"},
	{"service.position.command", Reloadable, noteNextHook},
	{"service.position.interval", Reloadable, noteNextHook},
	{"service.position.timeout", Reloadable, noteNextHook},

	{"fencing.allow_none", Reloadable, noteNextFence},
	{"fencing.methods", Reloadable, noteNextFence},
	{"fencing.methods[].rpc", Reloadable, noteNextFence},
	{"fencing.methods[].rpc.url", Reloadable, noteNextFence},
	{"fencing.methods[].rpc.token_file", Reloadable, noteNextFence},
	{"fencing.methods[].rpc.timeout", Reloadable, noteNextFence},
	{"fencing.methods[].rpc.ca_file", Reloadable, noteNextFence},
	{"fencing.methods[].rpc.allow_insecure_http", Reloadable, noteNextFence},
	{"fencing.methods[].ssh", Reloadable, noteNextFence},
	{"fencing.methods[].ssh.user", Reloadable, noteNextFence},
	{"fencing.methods[].ssh.port", Reloadable, noteNextFence},
	{"fencing.methods[].ssh.identity_file", Reloadable, noteNextFence},
	{"fencing.methods[].ssh.identity_files", Reloadable, noteNextFence},
	{"fencing.methods[].ssh.use_agent", Reloadable, noteNextFence},
	{"fencing.methods[].ssh.known_hosts", Reloadable, noteNextFence},
	{"fencing.methods[].ssh.insecure_ignore_host_key", Reloadable, noteNextFence},
	{"fencing.methods[].ssh.connect_timeout", Reloadable, noteNextFence},
	{"fencing.methods[].ssh.timeout", Reloadable, noteNextFence},
	{"fencing.methods[].ssh.command", Reloadable, noteNextFence},
	{"fencing.methods[].ssh.kill_port", Reloadable, noteNextFence},
	{"fencing.methods[].shell", Reloadable, noteNextFence},
	{"fencing.methods[].shell.command", Reloadable, noteNextFence},
	{"fencing.methods[].shell.timeout", Reloadable, noteNextFence},
	{"fencing.methods[].proves", Reloadable, noteNextFence + " (and the next fence of a suspected leader with election.fence_first); a reload that leaves fence_first no proving method is refused"},

	{"log.format", Restart, "the log handler is set up at start"},
	{"log.level", Reloadable, ""},
}

// ReloadRuleFor returns the row of path, a YAML path with or without list
// indexes; ok is false when there is none.
func ReloadRuleFor(path string) (ReloadRule, bool) {
	p := listIndex.ReplaceAllString(path, "[]")
	for _, r := range ReloadRules {
		if r.Path == p {
			return r, true
		}
	}
	return ReloadRule{}, false
}

var listIndex = regexp.MustCompile(`\[\d+\]`)

// Change is a key whose value differs between the running config and the
// one a reload read.
type Change struct {
	// Path is the key's YAML path ("fencing.methods[1].rpc.url"); a whole
	// optional block when it was added or removed ("service.pre_promote"),
	// a whole list when its length changed ("fencing.methods").
	Path string
	// Refused, when set, says why a reload cannot apply this change.
	Refused string
}

func (c Change) String() string {
	if c.Refused == "" {
		return c.Path
	}
	return c.Path + ": " + c.Refused
}

// CompareForReload lists the keys whose values differ between cur, the
// config the daemon runs, and next, the one a reload read, in file order;
// a change that a reload cannot apply says why (Change.Refused). start is
// the config the daemon started with: the lease was sized for its demote
// budget, so service.demote.timeout may not exceed its value there.
func CompareForReload(start, cur, next *Config) []Change {
	var out []Change
	diff(reflect.ValueOf(cur).Elem(), reflect.ValueOf(next).Elem(), "", &out)
	for i := range out {
		r, ok := ReloadRuleFor(out[i].Path)
		switch {
		case !ok:
			out[i].Refused = "no reload rule for this key: restart to apply it"
		case r.Reload == Restart:
			out[i].Refused = "cannot change at run time: " + r.Note + "; restart to apply it"
		}
		if out[i].Path == "service.demote.timeout" && next.demoteBudget() > start.demoteBudget() {
			out[i].Refused = fmt.Sprintf("cannot be raised above %s, its value at start, at run time: the lease was sized for that demote budget; restart to apply it",
				fmtDur(time.Duration(start.Service.Demote.Timeout)))
		}
	}
	return out
}

// Refused returns the changes a reload cannot apply.
func Refused(changes []Change) []Change {
	var out []Change
	for _, c := range changes {
		if c.Refused != "" {
			out = append(out, c)
		}
	}
	return out
}

// diff appends the paths whose values differ between a and b, values of
// the same type at YAML path p.
func diff(a, b reflect.Value, p string, out *[]Change) {
	switch a.Kind() {
	case reflect.Struct:
		t := a.Type()
		for i := range t.NumField() {
			name := yamlName(t.Field(i))
			if name == "" {
				continue
			}
			diff(a.Field(i), b.Field(i), join(p, name), out)
		}
	case reflect.Pointer:
		switch {
		case a.IsNil() && b.IsNil():
		case a.IsNil() != b.IsNil():
			*out = append(*out, Change{Path: p})
		case a.Elem().Kind() == reflect.Struct:
			diff(a.Elem(), b.Elem(), p, out)
		default:
			diff(a.Elem(), b.Elem(), p, out)
		}
	case reflect.Slice:
		if a.Type().Elem().Kind() == reflect.Struct && a.Len() == b.Len() {
			for i := range a.Len() {
				diff(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", p, i), out)
			}
			return
		}
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, Change{Path: p})
		}
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, Change{Path: p})
		}
	}
}

// ReloadPaths lists every path ReloadRules must have a row for: each key
// of Config, each optional block and each list of blocks, with "[]" for
// list indexes.
func ReloadPaths() []string {
	var out []string
	var walk func(t reflect.Type, p string)
	walk = func(t reflect.Type, p string) {
		switch {
		case t.Kind() == reflect.Struct:
			for i := range t.NumField() {
				if name := yamlName(t.Field(i)); name != "" {
					walk(t.Field(i).Type, join(p, name))
				}
			}
		case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
			out = append(out, p)
			walk(t.Elem(), p)
		case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
			out = append(out, p)
			walk(t.Elem(), p+"[]")
		default:
			out = append(out, p)
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return out
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" || !f.IsExported() {
		return ""
	}
	return name
}

func join(p, name string) string {
	if p == "" {
		return name
	}
	return p + "." + name
}
