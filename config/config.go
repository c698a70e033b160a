package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/failoverd/failoverd/fencer"
	"github.com/failoverd/failoverd/internal/loopback"
)

// Election modes accepted by Election.Mode.
const (
	// ModeFair queues candidates in the order they joined: when the leader
	// goes, the longest-waiting healthy candidate takes over.
	ModeFair = "fair"
	// ModeUnfair lets every candidate race for leadership when it frees up,
	// as Hadoop's ZKFC does.
	ModeUnfair = "unfair"
)

// Log formats accepted by Log.Format.
const (
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// AuthSchemeDigest is the only ZooKeeper authentication scheme supported.
const AuthSchemeDigest = "digest"

// Coordination backends named by Coordination.Backend: the service the
// election, the member records and the breadcrumb live in.
const (
	// BackendZooKeeper runs on a ZooKeeper ensemble (the zookeeper block).
	// The default.
	BackendZooKeeper = "zookeeper"
	// BackendEtcd runs on an etcd cluster (the etcd block).
	BackendEtcd = "etcd"
)

// supportedBackends lists the values of Coordination.Backend this build
// accepts, in the order messages list them.
var supportedBackends = []string{BackendZooKeeper, BackendEtcd}

// Config is the whole failoverd configuration file. Obtain one from Load,
// Parse or Default; the zero value is not useful.
type Config struct {
	// Cluster names the group of nodes that elect one leader. It becomes a
	// znode name under ZooKeeper.Root. Required; letters, digits, '.', '_', '-'.
	Cluster string `yaml:"cluster"`
	// Node describes this daemon.
	Node Node `yaml:"node"`
	// Coordination chooses the service the election runs on.
	Coordination Coordination `yaml:"coordination"`
	// ZooKeeper is the ensemble the election runs on when
	// Coordination.Backend is BackendZooKeeper; the file must then have a
	// zookeeper block.
	ZooKeeper ZooKeeper `yaml:"zookeeper"`
	// Etcd is the etcd cluster for BackendEtcd; nil when the file has no
	// etcd block. Validation refuses the block beside any other backend.
	Etcd *Etcd `yaml:"etcd,omitempty"`
	// Election tunes how leadership is won and kept.
	Election Election `yaml:"election"`
	// Health checks the local service.
	Health Health `yaml:"health"`
	// Service holds the promote and demote hooks.
	Service Service `yaml:"service"`
	// Fencing stops a previous leader before this node promotes.
	Fencing Fencing `yaml:"fencing"`
	// Log configures the daemon's logs.
	Log Log `yaml:"log"`
}

// Node describes this failoverd instance.
type Node struct {
	// ID identifies this node in the cluster (member znode name, breadcrumb,
	// FAILOVERD_NODE_ID). Required; letters, digits, '.', '_', '-'.
	ID string `yaml:"id"`
	// Host is the host name or IP address peers use to reach this node (ssh
	// fencing, the default admin URL). Required.
	Host string `yaml:"host"`
	// ServiceAddress is the host:port of this node's service, the address
	// replicas and clients use (distinct from the admin API). Optional; it
	// is published in the member record and the breadcrumb and handed to
	// the other nodes' follow hooks (FAILOVERD_LEADER_ADDRESS) and to the
	// successor's promote hook (FAILOVERD_PREVIOUS_ADDRESS). Set it only
	// once every node runs a version that knows it: earlier versions read
	// a breadcrumb with it as corrupt.
	ServiceAddress string `yaml:"service_address,omitempty"`
	// Priority says whether this node may lead: 0 never (it does not join
	// the election but checks health, follows the leader and shows in
	// status; a failover --to it is refused), >= 1 it may, and a higher
	// one is preferred (controller/choice.go). Default 1.
	Priority int `yaml:"priority"`
	// Admin configures the HTTP admin API.
	Admin Admin `yaml:"admin"`
	// ShutdownTimeout bounds a graceful stop (demote, delete the breadcrumb,
	// leave the election, close the session). Default 30s; must be at least
	// the graceful demote's timeout (Service.Demote.Graceful) plus its kill
	// grace.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// StateDir is where the daemon remembers, across restarts, the cluster
	// record it last ran in and the highest epoch it led with (one file
	// per cluster and node id): it refuses to join a cluster in another
	// coordination service until the cluster was moved there with
	// failoverd migrate. An absolute path; the daemon creates it (mode
	// 0700). Default /var/lib/failoverd.
	StateDir string `yaml:"state_dir"`
}

// Admin configures the admin HTTP API (metrics, status, /leader, /v1/demote).
type Admin struct {
	// Listen is the host:port the API listens on. Default "127.0.0.1:9101".
	Listen string `yaml:"listen"`
	// AdvertiseURL is the base URL peers use to reach this API; it is
	// published in the member znode and the breadcrumb, and used by their rpc
	// fencing. Default:
	// see Config.AdminURL.
	AdvertiseURL string `yaml:"advertise_url,omitempty"`
	// TokenFile holds the bearer token that mutating endpoints require. Without
	// it those endpoints are disabled. Optional.
	TokenFile string `yaml:"token_file,omitempty"`
	// TLS, when set, serves the API over HTTPS only. Optional.
	TLS *AdminTLS `yaml:"tls,omitempty"`
}

// AdminTLS is the admin API's certificate. Both files are required.
type AdminTLS struct {
	// CertFile is the PEM certificate chain, leaf first.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key; group and others must have no access.
	KeyFile string `yaml:"key_file"`
}

// Coordination chooses the coordination backend.
type Coordination struct {
	// Backend names the service the election, member records and
	// breadcrumb live in: BackendZooKeeper (the default, also when the
	// coordination block is absent) or BackendEtcd. The block of that
	// name must be set, and the other one not.
	Backend string `yaml:"backend"`
}

// ZooKeeper configures the connection to the ZooKeeper ensemble.
type ZooKeeper struct {
	// Servers lists the ensemble as host:port. Required.
	Servers []string `yaml:"servers"`
	// Root is the absolute znode path under which all clusters live.
	// Default "/failoverd".
	Root string `yaml:"root"`
	// SessionTimeout is the session timeout requested from ZooKeeper (the
	// server may adjust it). Default 5s; at least 1s.
	SessionTimeout Duration `yaml:"session_timeout"`
	// TickTime is the ensemble's tickTime, when known. The lease arithmetic
	// needs it (the ZooKeeper leader pings every tickTime/2); unset, it
	// assumes half the session timeout, the most ZooKeeper's default
	// minSessionTimeout (two ticks) allows, which costs tolerance.
	TickTime Duration `yaml:"tick_time,omitempty"`
	// Auth, when set, authenticates the session and restricts changes to the
	// znodes failoverd creates to that identity.
	Auth *ZooKeeperAuth `yaml:"auth,omitempty"`
	// TLS, when set, connects to the servers' secureClientPort over TLS,
	// verifying them with its CA bundle and, with a client certificate,
	// authenticating to them. Optional.
	TLS *ClientTLS `yaml:"tls,omitempty"`
}

// ZooKeeperAuth configures ZooKeeper authentication.
type ZooKeeperAuth struct {
	// Scheme is the ZooKeeper auth scheme. Only "digest" (the default).
	Scheme string `yaml:"scheme"`
	// CredentialsFile holds "user:password". Required when Auth is set.
	CredentialsFile string `yaml:"credentials_file"`
}

// Etcd configures the connection to an etcd cluster, for BackendEtcd.
type Etcd struct {
	// Endpoints lists the cluster's client URLs ("https://etcd1:2379").
	Endpoints []string `yaml:"endpoints"`
	// Prefix is the key prefix under which all clusters live. Default
	// "/failoverd".
	Prefix string `yaml:"prefix"`
	// LeaseTTL is the TTL of the etcd lease that holds this node's
	// candidacy and bounds a leader's term (see package etcdcluster).
	// Default 5s; whole seconds, at least MinEtcdLeaseTTL, and long enough
	// for the demote budget (the etcd backend's timing check).
	LeaseTTL Duration `yaml:"lease_ttl"`
	// DialTimeout bounds establishing a connection. 0 (unset): the etcd
	// backend's default, 5s.
	DialTimeout Duration `yaml:"dial_timeout"`
	// TLS, when set, connects over TLS. Optional.
	TLS *EtcdTLS `yaml:"tls,omitempty"`
	// Username authenticates with etcd's built-in users, with the
	// password in PasswordFile. Optional.
	Username string `yaml:"username,omitempty"`
	// PasswordFile holds Username's password (a secret file). Required
	// with Username.
	PasswordFile string `yaml:"password_file,omitempty"`
}

// EtcdTLS is the etcd client's TLS settings.
type EtcdTLS = ClientTLS

// Election configures how leadership is decided and kept.
type Election struct {
	// Mode is ModeFair (default) or ModeUnfair.
	Mode string `yaml:"mode"`
	// Lease is how long a leader that lost contact with ZooKeeper keeps acting
	// as leader, counted from the newest write the ZooKeeper leader provably
	// credited to its session, before it demotes itself. 0 (default) means
	// the longest that fits: session timeout - demote budget - session/20
	// (the ZooKeeper backend's timing check, cluster/zkcluster/lease).
	Lease Duration `yaml:"lease"`
	// WarmStandby has the standby that would lead next (fair: the one next
	// in line, and a failover target; unfair: every standby) renew its
	// ZooKeeper session as a leader does, so that it can act at once when
	// it wins instead of one renew interval later. Default true; the
	// target of a manual failover is warm whatever this says.
	WarmStandby bool `yaml:"warm_standby"`
	// MaxLag is how far (in service.position units) a candidate may be
	// behind the last position the leader published, or behind another
	// healthy candidate, and still promote. nil: no limit. Needs
	// Service.Position.
	MaxLag *int64 `yaml:"max_lag,omitempty"`
	// FailoverCooldown is how long after an automatic promotion the new
	// leader keeps leadership although its health fails (a lost session
	// or lease still ends it), so that a flapping cluster does not fail
	// over again and again. 0 (default): off.
	FailoverCooldown Duration `yaml:"failover_cooldown"`
	// PreemptAfter is how long a standby with a strictly higher
	// node.priority must have been healthy, eligible and campaigning before
	// the leader hands over to it (a graceful switchover). 0: never.
	// Default 10s.
	PreemptAfter Duration `yaml:"preempt_after"`
	// EndOwnTermOnRestart has a restarted daemon, once its startup demote
	// succeeded, remove its previous process's election entry (recorded in
	// the node state file at every win) instead of leaving the successor
	// to wait out the dead process's session or lease. Default false.
	// See docs/safety.md, "A restarted daemon ends its own old term".
	EndOwnTermOnRestart bool `yaml:"end_own_term_on_restart"`
	// TakeOverAtDeadline (ZooKeeper, fair mode) makes every lease renewal
	// a heartbeat the candidate next in line times, so that it ends a
	// silent leader's term once the leader's own deadline (lease + demote
	// budget + margin) passed, instead of waiting for ZooKeeper to expire
	// the session. Default false. No effect on etcd. See docs/safety.md,
	// "Taking over at the leader's own deadline".
	TakeOverAtDeadline bool `yaml:"take_over_at_deadline"`
	// FenceFirst (fair mode, both backends) makes every renewal a
	// heartbeat, which publishes the leader's renew interval, and the
	// candidate next in line times it; once one is overdue by
	// SuspectAfter, that candidate fences the leader with the fencing
	// methods that prove it cannot act (FencingMethod.Proving) and, when
	// one succeeded, ends the leader's term at once instead of waiting for
	// its session or lease to expire. Needs at least one proving method.
	// Default false. See docs/safety.md, "Fencing first, then taking
	// over".
	FenceFirst bool `yaml:"fence_first"`
	// SuspectAfter is how late (overdue) a leader's heartbeat may be
	// before the next candidate suspects the leader (FenceFirst): it
	// suspects once one heartbeat stood still, on its clock, for the renew
	// interval the leader publishes plus SuspectAfter, then probes the
	// leader and, unless the leader answers that it is connected, fences
	// it; while that heartbeat stands it asks again every
	// max(SuspectAfter, 0.5s). At least 100ms to spare a slow write
	// (validation warns below); the renew interval plus SuspectAfter
	// shorter than the session timeout or etcd.lease_ttl (else expiry
	// always comes first). Default DefaultSuspectAfter.
	SuspectAfter Duration `yaml:"suspect_after"`
	// RenewInterval is how often a leader renews its term, and so how
	// often its heartbeat moves (FenceFirst, TakeOverAtDeadline). 0
	// (default): the backend derives it (ZooKeeper: tickTime/2 + 5%;
	// etcd: min(etcd.lease_ttl/3, 1s)). A shorter one has a crashed
	// leader suspected sooner (on average renew/2 + SuspectAfter after
	// the crash) at the cost of every candidate renewing at that rate.
	// At least MinRenewInterval (validation warns below
	// RenewIntervalLow), at most the derived value; ZooKeeper cannot
	// renew faster than the derived value (its renewals prove the session
	// alive only when spaced that far apart), so there it must be 0 or
	// that value.
	RenewInterval Duration `yaml:"renew_interval,omitempty"`
}

// SuspectAfterOrDefault is SuspectAfter, or DefaultSuspectAfter when it
// is 0 (a Config built in Go without Default).
func (e Election) SuspectAfterOrDefault() time.Duration {
	if e.SuspectAfter == 0 {
		return DefaultSuspectAfter
	}
	return e.SuspectAfter.Std()
}

// Health configures the local service health check. Exactly one of HTTP,
// TCP and Exec must be set.
type Health struct {
	// Interval between checks. Default 1s.
	Interval Duration `yaml:"interval"`
	// Timeout of one check. Default 1s.
	Timeout Duration `yaml:"timeout"`
	// Rise is how many consecutive passing checks make the service healthy.
	// 0 (unset): the default of package healthcheck (DefaultRise, 2).
	Rise int `yaml:"rise"`
	// Fall is how many consecutive failing checks make it unhealthy.
	// 0 (unset): the default of package healthcheck (DefaultFall, 3).
	Fall int `yaml:"fall"`
	// HTTP checks with a GET request.
	HTTP *HTTPCheck `yaml:"http,omitempty"`
	// TCP checks that a port accepts connections.
	TCP *TCPCheck `yaml:"tcp,omitempty"`
	// Exec checks by running a program.
	Exec *ExecCheck `yaml:"exec,omitempty"`
}

// HTTPCheck passes when a GET of URL answers 2xx (and contains ExpectBody).
type HTTPCheck struct {
	// URL to GET, http or https. Required.
	URL string `yaml:"url"`
	// ExpectBody, when set, must occur in the response body. Optional.
	ExpectBody string `yaml:"expect_body,omitempty"`
}

// TCPCheck passes when a TCP connection to Address can be opened.
type TCPCheck struct {
	// Address is host:port. Required.
	Address string `yaml:"address"`
}

// ExecCheck passes when Command exits 0.
type ExecCheck struct {
	// Command is the argv to run (no shell). Required.
	Command []string `yaml:"command"`
}

// Service holds the hooks that change the local service's role.
type Service struct {
	// Promote makes the local service the primary. Timeout default 30s.
	Promote Hook `yaml:"promote"`
	// Demote makes the local service stop acting as primary. Timeout
	// default 1s; it is part of the demote budget (controller.DemoteBudget),
	// which the lease leaves free in the session timeout. GracefulTimeout bounds the
	// demote of a leader that ends its term on purpose.
	Demote DemoteHook `yaml:"demote"`
	// PrePromote runs on the elected node after the previous leader was
	// fenced and before the breadcrumb is written; a non-zero exit or a
	// timeout vetoes the promotion (the node gives leadership back and
	// backs off). Optional; timeout default 30s.
	PrePromote *Hook `yaml:"pre_promote,omitempty"`
	// Follow points the local service at the promoted leader on every node
	// that is not the leader. Optional.
	Follow *FollowHook `yaml:"follow,omitempty"`
	// Position prints the service's replication position, which every node
	// publishes (election.max_lag compares them). Optional.
	Position *PositionCommand `yaml:"position,omitempty"`
}

// PositionCommand is service.position: a command run every Interval that
// prints one non-negative decimal integer, how much of the primary's
// stream the local service holds (a Redis replication offset, a log
// index). Greater means more advanced.
type PositionCommand struct {
	// Command is the argv to run (no shell). Required.
	Command []string `yaml:"command"`
	// Interval between the starts of two runs. Default 1s.
	Interval Duration `yaml:"interval"`
	// Timeout after which a run is killed and the position is unknown.
	// Default: Interval; at most Interval.
	Timeout Duration `yaml:"timeout"`
}

// FollowHook is the follow hook: run on a node that is not the leader
// whenever the promoted leader changes (and once at start-up and after a
// demote), retried with back-off until it succeeds.
type FollowHook struct {
	// Command is the argv to run (no shell). Required.
	Command []string `yaml:"command"`
	// Timeout after which the hook is sent SIGTERM and counts as failed
	// (then retried). Default 30s.
	Timeout Duration `yaml:"timeout"`
	// NoLeaderAfter is how long without a promoted leader before the hook
	// runs once with empty FAILOVERD_LEADER_* (FAILOVERD_REASON=no_leader),
	// so that the service can park itself. Default 30s; 0 never runs it.
	NoLeaderAfter *Duration `yaml:"no_leader_after,omitempty"`
}

// NoLeaderWait is NoLeaderAfter with its default applied (0: never).
func (f *FollowHook) NoLeaderWait() time.Duration {
	if f.NoLeaderAfter == nil {
		return DefaultFollowNoLeaderAfter
	}
	return time.Duration(*f.NoLeaderAfter)
}

// Hook is a command run with a timeout, in its own process group.
type Hook struct {
	// Command is the argv to run (no shell). Required.
	Command []string `yaml:"command"`
	// Timeout after which the hook is sent SIGTERM and counts as failed. It
	// then gets a kill grace to exit before its process group is sent
	// SIGKILL: 250ms for the promote and demote hooks (controller.KillGrace,
	// part of the demote budget).
	Timeout Duration `yaml:"timeout"`
}

// DemoteHook is service.demote: a Hook with a second timeout for the
// demote of a leader that ends its term on purpose.
type DemoteHook struct {
	// Command is the argv to run (no shell). Required.
	Command []string `yaml:"command"`
	// Timeout bounds a demote forced by the end of the lease (and every
	// other demote but the graceful one): after it the hook is sent
	// SIGTERM and counts as failed, then SIGKILL after a kill grace of
	// 250ms (controller.KillGrace). Part of the demote budget. Default 1s.
	Timeout Duration `yaml:"timeout"`
	// GracefulTimeout bounds the demote of a leader that ends its term on
	// purpose (a graceful stop, a cede, a handover to the target of
	// failover --to or of a preemption): the leader keeps its term, and
	// renews it, until the demote is over, so this timeout is not part of
	// the demote budget and may be well beyond the session timeout. If the
	// term is lost meanwhile, the demote is cut short as a forced one and
	// the successor fences. Must be at least Timeout; node.shutdown_timeout
	// must hold it and its kill grace. Default (nil): Timeout.
	GracefulTimeout *Duration `yaml:"graceful_timeout,omitempty"`
}

// Graceful is GracefulTimeout with its default applied.
func (d DemoteHook) Graceful() time.Duration {
	if d.GracefulTimeout == nil {
		return time.Duration(d.Timeout)
	}
	return time.Duration(*d.GracefulTimeout)
}

// Fencing configures how the previous leader is stopped before this node
// promotes.
type Fencing struct {
	// AllowNone lets the daemon run with no fencing method. Unsafe: a paused
	// old leader may keep acting as primary. Default false.
	AllowNone bool `yaml:"allow_none,omitempty"`
	// Methods are tried in order until one succeeds.
	Methods []FencingMethod `yaml:"methods"`
}

// FencingMethod is one entry of Fencing.Methods; exactly one field is set.
type FencingMethod struct {
	// RPC asks the old leader's daemon to demote.
	RPC *RPCFencing `yaml:"rpc,omitempty"`
	// SSH stops the old leader's service over ssh.
	SSH *SSHFencing `yaml:"ssh,omitempty"`
	// Shell runs a local fencing program.
	Shell *ShellFencing `yaml:"shell,omitempty"`
	// Proves, when set, says whether this method's success proves that
	// the target can no longer act as leader, which election.fence_first
	// requires of the methods it uses. nil: the method's own default (see
	// Proving): rpc proves, ssh and shell do not. Set it true on an ssh or
	// shell method only when its command verifies the target is stopped
	// (killed, then checked gone; powered off, then checked off) before
	// it exits 0.
	Proves *bool `yaml:"proves,omitempty"`
}

// Proving reports whether m proves, when it succeeds, that the target can
// no longer act (fencer.Step.Proves): Proves when set, else true for rpc
// only. An rpc success is the old daemon's own answer that it demoted the
// service of the target's node in the target's term or a later one
// (fencer.RPC.Fence checks the node id and the epoch); an ssh or shell
// success is an exit status, which proves only what the command checked.
func (m FencingMethod) Proving() bool {
	if m.Proves != nil {
		return *m.Proves
	}
	return m.RPC != nil
}

// StepTimeout is the time the daemon's fencing chain gives m
// (fencer.Step.Timeout), as cmd/failoverd builds it: rpc its timeout
// (or the fencer's default), ssh its timeout, shell its timeout plus the
// kill grace and the wait after SIGKILL. 0 when no method is set.
func (m FencingMethod) StepTimeout() time.Duration {
	switch {
	case m.RPC != nil:
		return fencer.RPCConfig{Timeout: m.RPC.Timeout.Std()}.StepTimeout()
	case m.SSH != nil:
		return m.SSH.Timeout.Std()
	case m.Shell != nil:
		return fencer.ShellConfig{Timeout: m.Shell.Timeout.Std()}.StepTimeout()
	}
	return 0
}

// Name returns "rpc", "ssh" or "shell", or "" when no method is set.
func (m FencingMethod) Name() string {
	switch {
	case m.RPC != nil:
		return "rpc"
	case m.SSH != nil:
		return "ssh"
	case m.Shell != nil:
		return "shell"
	}
	return ""
}

// RPCFencing asks the old leader's failoverd to demote (POST /v1/demote).
type RPCFencing struct {
	// URL is a fixed admin API base URL called instead of the one the old
	// leader published (useful behind a proxy, or with two nodes). Optional.
	URL string `yaml:"url,omitempty"`
	// TokenFile holds the bearer token of the old leader's admin API.
	// Unset: Node.Admin.TokenFile (see Config.RPCToken). Required here or
	// there.
	TokenFile string `yaml:"token_file,omitempty"`
	// Timeout of the whole call. 0 (unset): the default of package fencer
	// (DefaultRPCTimeout, 5s).
	Timeout Duration `yaml:"timeout"`
	// CAFile is a PEM bundle of the CA certificates that verify the old
	// leader's https admin API. Default: the system roots.
	CAFile string `yaml:"ca_file,omitempty"`
	// AllowInsecureHTTP lets the token go over plain http to a host that is
	// not loopback. Dangerous: whoever sees the traffic, or can write the
	// breadcrumb's admin URL, gets the token. Default false.
	AllowInsecureHTTP bool `yaml:"allow_insecure_http,omitempty"`
}

// SSHFencing logs in to the old leader's host and runs Command, or kills the
// process listening on KillPort. Exactly one of Command and KillPort is set.
type SSHFencing struct {
	// User to log in as. Required.
	User string `yaml:"user"`
	// Port of the ssh server. 0 (unset): the default of package fencer
	// (DefaultSSHPort, 22).
	Port int `yaml:"port"`
	// IdentityFile is a private key file. Set it, IdentityFiles, or UseAgent.
	IdentityFile string `yaml:"identity_file,omitempty"`
	// IdentityFiles lists private key files, tried in order.
	IdentityFiles []string `yaml:"identity_files,omitempty"`
	// UseAgent offers the keys of the agent at $SSH_AUTH_SOCK.
	UseAgent bool `yaml:"use_agent,omitempty"`
	// KnownHosts is an OpenSSH known_hosts file used to verify host keys.
	// Required unless InsecureIgnoreHostKey.
	KnownHosts string `yaml:"known_hosts,omitempty"`
	// InsecureIgnoreHostKey skips host key verification. For tests only.
	InsecureIgnoreHostKey bool `yaml:"insecure_ignore_host_key,omitempty"`
	// ConnectTimeout bounds TCP connect plus ssh handshake. 0 (unset): the
	// default of package fencer (DefaultSSHConnectTimeout, 5s).
	ConnectTimeout Duration `yaml:"connect_timeout"`
	// Timeout bounds the whole method. Default 10s.
	Timeout Duration `yaml:"timeout"`
	// Command is a command line run by the remote user's shell; exit 0 means
	// fenced.
	Command string `yaml:"command,omitempty"`
	// KillPort kills the process listening on this TCP port on the target.
	KillPort int `yaml:"kill_port,omitempty"`
}

// Identities returns the configured private key files, IdentityFile first.
func (s *SSHFencing) Identities() []string {
	var ids []string
	if s.IdentityFile != "" {
		ids = append(ids, s.IdentityFile)
	}
	return append(ids, s.IdentityFiles...)
}

// ShellFencing runs a local command; exit 0 means fenced.
type ShellFencing struct {
	// Command is the argv to run (no shell). Required.
	Command []string `yaml:"command"`
	// Timeout after which the command is killed and counts as failed.
	// Default 30s.
	Timeout Duration `yaml:"timeout"`
}

// Log configures the daemon's log output.
type Log struct {
	// Format is "text" (default) or "json".
	Format string `yaml:"format"`
	// Level is "debug", "info" (default), "warn" or "error".
	Level string `yaml:"level"`
}

// Defaults. Default sets them on a fresh Config; applyDefaults sets those
// of list elements (fencing methods), which the decoder creates empty.
// Settings whose default belongs to the package that uses them (health
// rise and fall, the rpc timeout, the ssh port and connect timeout, the
// lease) are not here: they stay 0 when unset, and that package applies its
// own default, so that each default is defined once.
const (
	DefaultBackend             = BackendZooKeeper
	DefaultAdminListen         = "127.0.0.1:9101"
	DefaultShutdownTimeout     = 30 * time.Second
	DefaultStateDir            = "/var/lib/failoverd"
	DefaultRoot                = "/failoverd"
	DefaultSessionTimeout      = 5 * time.Second
	DefaultHealthInterval      = time.Second
	DefaultHealthTimeout       = time.Second
	DefaultPromoteTimeout      = 30 * time.Second
	DefaultDemoteTimeout       = time.Second
	DefaultFollowTimeout       = 30 * time.Second
	DefaultPrePromoteTimeout   = 30 * time.Second
	DefaultPriority            = 1
	DefaultPreemptAfter        = 10 * time.Second
	DefaultPositionInterval    = time.Second
	DefaultFollowNoLeaderAfter = 30 * time.Second
	DefaultSSHTimeout          = 10 * time.Second
	DefaultShellFencingTimeout = 30 * time.Second
	DefaultEtcdPrefix          = "/failoverd"
	DefaultEtcdLeaseTTL        = 5 * time.Second
	// DefaultSuspectAfter is election.suspect_after's default. It is an
	// overdue allowance beyond the renew interval the leader publishes
	// (ZooKeeper: tickTime/2 + 5%, 1.05s with the usual tickTime of 2s,
	// 1.3125s when it is unknown and the session timeout is 5s; etcd:
	// min(lease_ttl/3, 1s)), not the whole time a heartbeat stands: a
	// renewal write late by a slow fsync or a short pause still lands
	// within it, and a false suspicion costs only a probe of the leader's
	// admin API, which a connected leader answers and is left alone.
	// With it a crashed leader fails over in about renew/2 + suspect_after
	// + probe + proving fence + promote on average (the crash falls half
	// a renew interval after the last heartbeat), and renew +
	// suspect_after (at most 1.6125s) stays well below the default
	// session timeout and etcd lease TTL (5s).
	DefaultSuspectAfter = 300 * time.Millisecond
)

// MinSessionTimeout is the shortest zookeeper.session_timeout accepted.
const MinSessionTimeout = time.Second

// MinLease is the shortest election.lease accepted, whatever the other
// settings: a lease of a few round trips is never renewed in time, and a
// lease of nanoseconds would make no sense. The real floor depends on the
// tickTime (the ZooKeeper backend's timing check).
const MinLease = 200 * time.Millisecond

// MinTimeout is the shortest timeout or interval accepted for health checks,
// hooks, fencing and shutdown. Below it no process can be started and no
// connection opened in time, so the check, hook or fence always fails (and
// a fence that always fails blocks every promotion), or a check loop spins.
const MinTimeout = 10 * time.Millisecond

// MaxDuration bounds every duration in the file, so that the sums the
// daemon derives from them (timeout plus kill grace, lease plus renewal
// interval) cannot overflow.
const MaxDuration = 24 * time.Hour

// Default returns a Config holding every default. Load and Parse decode the
// file on top of it.
func Default() *Config {
	return &Config{
		Node: Node{
			Admin:           Admin{Listen: DefaultAdminListen},
			Priority:        DefaultPriority,
			ShutdownTimeout: Duration(DefaultShutdownTimeout),
			StateDir:        DefaultStateDir,
		},
		Coordination: Coordination{Backend: DefaultBackend},
		ZooKeeper: ZooKeeper{
			Root:           DefaultRoot,
			SessionTimeout: Duration(DefaultSessionTimeout),
		},
		Election: Election{Mode: ModeFair, WarmStandby: true, PreemptAfter: Duration(DefaultPreemptAfter),
			SuspectAfter: Duration(DefaultSuspectAfter)},
		Health: Health{
			Interval: Duration(DefaultHealthInterval),
			Timeout:  Duration(DefaultHealthTimeout),
		},
		Service: Service{
			Promote: Hook{Timeout: Duration(DefaultPromoteTimeout)},
			Demote:  DemoteHook{Timeout: Duration(DefaultDemoteTimeout)},
		},
		Log: Log{Format: LogFormatText, Level: "info"},
	}
}

// applyDefaults fills what Default cannot: list elements and optional blocks,
// which the decoder creates from zero values.
func (c *Config) applyDefaults() {
	if p := c.Service.PrePromote; p != nil && p.Timeout == 0 {
		p.Timeout = Duration(DefaultPrePromoteTimeout)
	}
	if p := c.Service.Position; p != nil {
		if p.Interval == 0 {
			p.Interval = Duration(DefaultPositionInterval)
		}
		if p.Timeout == 0 {
			p.Timeout = p.Interval
		}
	}
	if f := c.Service.Follow; f != nil && f.Timeout == 0 {
		f.Timeout = Duration(DefaultFollowTimeout)
	}
	if a := c.ZooKeeper.Auth; a != nil && a.Scheme == "" {
		a.Scheme = AuthSchemeDigest
	}
	if e := c.Etcd; e != nil {
		if e.Prefix == "" {
			e.Prefix = DefaultEtcdPrefix
		}
		if e.LeaseTTL == 0 {
			e.LeaseTTL = Duration(DefaultEtcdLeaseTTL)
		}
	}
	for _, m := range c.Fencing.Methods {
		if s := m.SSH; s != nil && s.Timeout == 0 {
			s.Timeout = Duration(DefaultSSHTimeout)
		}
		if s := m.Shell; s != nil && s.Timeout == 0 {
			s.Timeout = Duration(DefaultShellFencingTimeout)
		}
	}
}

// AdminURL returns the base URL (no trailing slash) peers use to reach this
// node's admin API: Node.Admin.AdvertiseURL when set, otherwise
// "http://" (or "https://" with Node.Admin.TLS) + Node.Admin.Listen with
// Node.Host in place of an empty or unspecified (0.0.0.0, ::) listen host.
// It returns "" if Listen is invalid.
func (c *Config) AdminURL() string {
	if u := c.Node.Admin.AdvertiseURL; u != "" {
		return strings.TrimRight(u, "/")
	}
	host, port, err := net.SplitHostPort(c.Node.Admin.Listen)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = c.Node.Host
	}
	scheme := "http://"
	if c.Node.Admin.TLS != nil {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(host, port)
}

// ReadToken reads the admin API bearer token from Node.Admin.TokenFile. It
// returns "" and no error when no token file is configured.
func (c *Config) ReadToken() (Secret, error) {
	if c.Node.Admin.TokenFile == "" {
		return "", nil
	}
	return ReadSecretFile(c.Node.Admin.TokenFile)
}

// RPCToken reads the bearer token that fencing method i, an rpc method,
// sends to the old leader's admin API: from the method's own token_file
// when it is set, else from node.admin.token_file. An error reading the
// file chosen is returned, naming its key; it never falls back to the other
// file, which would send a token the operator did not pick for this method.
func (c *Config) RPCToken(i int) (Secret, error) {
	if i < 0 || i >= len(c.Fencing.Methods) || c.Fencing.Methods[i].RPC == nil {
		return "", fmt.Errorf("fencing.methods[%d] is not an rpc method", i)
	}
	key, path := fmt.Sprintf("fencing.methods[%d].rpc.token_file", i), c.Fencing.Methods[i].RPC.TokenFile
	if path == "" {
		key, path = "node.admin.token_file", c.Node.Admin.TokenFile
	}
	if path == "" {
		return "", fmt.Errorf("fencing.methods[%d].rpc: no token_file, here or in node.admin", i)
	}
	s, err := ReadSecretFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	return s, nil
}

// ReadCredentials reads ZooKeeper's "user:password" from
// ZooKeeper.Auth.CredentialsFile. It returns "" and no error when no
// authentication is configured.
func (c *Config) ReadCredentials() (Secret, error) {
	a := c.ZooKeeper.Auth
	if a == nil {
		return "", nil
	}
	s, err := ReadSecretFile(a.CredentialsFile)
	if err != nil {
		return "", err
	}
	if user, _, ok := strings.Cut(string(s), ":"); !ok || user == "" {
		return "", fmt.Errorf("reading zookeeper credentials %s: want user:password", a.CredentialsFile)
	}
	return s, nil
}

// Warnings lists settings that validate but that an operator should know
// about, each with its YAML path: those of the backend's timing check
// (SetTimingChecks), such as a ZooKeeper leader that a move to another
// server (a server restart, a rolling upgrade, a reset connection) can
// cost its leadership; an admin URL on loopback that peers' rpc fencers
// cannot reach; an etcd.lease_ttl below etcd's advice; an etcd password
// sent over plain http; an rpc fencing timeout shorter than the demote
// timeout it waits for; with election.fence_first, an
// election.suspect_after below SuspectAfterLow and a proving rpc method
// allowed over plain http; an election.renew_interval below
// RenewIntervalLow; a graceful stop longer than the shipped unit
// allows.
func (c *Config) Warnings() []string {
	var w []string
	if s := c.loopbackAdminWarning(); s != "" {
		w = append(w, s)
	}
	w = append(w, c.timingWarnings()...)
	if s := c.etcdLeaseWarning(); s != "" {
		w = append(w, s)
	}
	if c.Election.TakeOverAtDeadline && c.Coordination.Backend == BackendEtcd {
		w = append(w, "election.take_over_at_deadline has no effect on etcd: etcd ends a silent leader's lease at its TTL, which is already close to the leader's own deadline")
	}
	if s := c.etcdPasswordWarning(); s != "" {
		w = append(w, s)
	}
	w = append(w, c.rpcTimeoutWarnings()...)
	if s := c.renewIntervalWarning(); s != "" {
		w = append(w, s)
	}
	w = append(w, c.fenceFirstWarnings()...)
	if s := c.unitStopWarning(); s != "" {
		w = append(w, s)
	}
	return w
}

// UnitTimeoutStop is TimeoutStopSec of the shipped systemd unit
// (configs/failoverd.service): systemd SIGKILLs the daemon when a stop
// takes longer.
const UnitTimeoutStop = 45 * time.Second

// unitStopMargin is what a stop needs beyond node.shutdown_timeout: the
// session's close and the process's exit.
const unitStopMargin = 5 * time.Second

// unitStopWarning: a graceful stop longer than the shipped unit lets it
// run is cut by systemd's SIGKILL, with the demote possibly running.
func (c *Config) unitStopWarning() string {
	if c.Node.ShutdownTimeout.Std()+unitStopMargin <= UnitTimeoutStop {
		return ""
	}
	return fmt.Sprintf("node.shutdown_timeout: %v plus %v for the exit is more than the shipped systemd unit's TimeoutStopSec=%v: "+
		"systemd would SIGKILL failoverd during a long graceful stop; under systemd, raise TimeoutStopSec to at least %v in a drop-in (systemctl edit failoverd)",
		c.Node.ShutdownTimeout.Std(), unitStopMargin, UnitTimeoutStop, c.Node.ShutdownTimeout.Std()+unitStopMargin)
}

// loopbackAdminWarning: peers fence this node by rpc at the admin URL it
// publishes; a loopback one reaches each peer's own daemon (which refuses
// the request), so the rpc method can never fence this node.
func (c *Config) loopbackAdminWarning() string {
	rpc := false
	for _, m := range c.Fencing.Methods {
		rpc = rpc || m.RPC != nil && m.RPC.URL == ""
	}
	u, err := url.Parse(c.AdminURL())
	if !rpc || err != nil || !loopback.Host(u.Hostname()) || loopback.Host(c.Node.Host) {
		return ""
	}
	return fmt.Sprintf("node.admin.listen: this node publishes the admin URL %s, a loopback address, while node.host is %s: "+
		"a peer's rpc fencer would reach its own daemon, not this one, so rpc fencing of this node always fails (the next method runs); "+
		"listen on an address peers reach (with node.admin.tls, or allow_insecure_http on their rpc method) or set node.admin.advertise_url",
		c.AdminURL(), c.Node.Host)
}
