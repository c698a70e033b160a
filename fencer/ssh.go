package fencer

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/failoverd/failoverd/internal/secret"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Defaults of SSHConfig.
const (
	DefaultSSHPort           = 22
	DefaultSSHConnectTimeout = 5 * time.Second
)

// sshOutputLimit bounds how much of each remote output stream is kept for
// error messages; a chatty or runaway command must not fill our memory.
const sshOutputLimit = 4 << 10

// sshSignalGrace bounds how long a canceled Fence waits to ask the remote side
// to kill the command before it drops the connection.
const sshSignalGrace = 100 * time.Millisecond

// SSHConfig configures the ssh fencing method. Exactly one of Command and
// KillPort must be set, and host keys are verified unless
// InsecureIgnoreHostKey says otherwise.
type SSHConfig struct {
	// User is the remote login name. Required.
	User string
	// Port is the target's sshd port. 0: DefaultSSHPort.
	Port int
	// Address, when set, is dialled ("host:port") instead of Target.Host and
	// Port, and is the name looked up in KnownHostsFile. Meant for tests and
	// for targets reachable only through a fixed address.
	Address string
	// IdentityFiles are unencrypted private keys (OpenSSH or PEM format),
	// read once by NewSSH. Encrypted keys belong in an ssh-agent.
	IdentityFiles []string
	// UseAgent adds the keys of the ssh-agent at $SSH_AUTH_SOCK, looked up on
	// every Fence.
	UseAgent bool
	// KnownHostsFile lists the accepted host keys in OpenSSH known_hosts
	// format; it is re-read on every Fence. An unknown or changed host key
	// fails the method. Required unless InsecureIgnoreHostKey is set.
	KnownHostsFile string
	// InsecureIgnoreHostKey accepts any host key, so anyone on the path can
	// pose as the target. For labs only; every use is logged as a warning.
	InsecureIgnoreHostKey bool
	// ConnectTimeout bounds TCP connect, SSH handshake and authentication
	// together. 0: DefaultSSHConnectTimeout. The whole Fence is bounded by its
	// context.
	ConnectTimeout time.Duration
	// Command is run verbatim by the remote user's login shell; exit status 0
	// means the target is fenced. Target facts are offered as environment
	// variables (FAILOVERD_TARGET_ID, FAILOVERD_TARGET_HOST,
	// FAILOVERD_TARGET_ADMIN_URL, FAILOVERD_TARGET_EPOCH), which sshd only
	// passes on when its AcceptEnv allows them. A background process that
	// keeps stdout open keeps the session open until the timeout.
	Command string
	// KillPort, when set, kills (SIGKILL) every process listening on this TCP
	// port of a Linux target and succeeds only when nothing listens on it
	// afterwards, or when nothing listened in the first place.
	KillPort int
}

// SSH fences a target by logging in with SSH and either running a configured
// command or killing whatever listens on a TCP port.
type SSH struct {
	cfg     SSHConfig
	signers []ssh.Signer
	logger  *slog.Logger
}

var _ Method = (*SSH)(nil)

// NewSSH validates cfg, applies defaults and reads the identity files. Errors
// name config keys (user, kill_port, ...); the caller adds where they are.
func NewSSH(cfg SSHConfig, deps Deps) (*SSH, error) {
	logger := deps.logger()
	if cfg.Port == 0 {
		cfg.Port = DefaultSSHPort
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultSSHConnectTimeout
	}
	cfg.IdentityFiles = slices.Clone(cfg.IdentityFiles)

	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if cfg.User == "" {
		bad("user is required")
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		bad("port must be in 1..65535, got %d", cfg.Port)
	}
	if cfg.Address != "" {
		if _, _, err := net.SplitHostPort(cfg.Address); err != nil {
			bad("address %q must be host:port: %w", cfg.Address, err)
		}
	}
	if cfg.ConnectTimeout < 0 {
		bad("connect timeout must be > 0, got %s", cfg.ConnectTimeout)
	}
	switch {
	case cfg.Command == "" && cfg.KillPort == 0:
		bad("one of command and kill_port is required")
	case cfg.Command != "" && cfg.KillPort != 0:
		bad("command and kill_port are mutually exclusive")
	case cfg.KillPort < 0 || cfg.KillPort > 65535:
		bad("kill_port must be in 1..65535, got %d", cfg.KillPort)
	case cfg.KillPort != 0 && cfg.Address == "" && cfg.KillPort == cfg.Port:
		bad("kill_port %d is the ssh port itself", cfg.KillPort)
	}
	switch {
	case cfg.KnownHostsFile == "" && !cfg.InsecureIgnoreHostKey:
		bad("known_hosts_file is required (insecure_ignore_host_key exists for labs only)")
	case cfg.KnownHostsFile != "" && cfg.InsecureIgnoreHostKey:
		bad("known_hosts_file and insecure_ignore_host_key are mutually exclusive")
	case cfg.KnownHostsFile != "":
		if _, err := knownhosts.New(cfg.KnownHostsFile); err != nil {
			bad("reading known hosts: %w", err)
		}
	}
	if len(cfg.IdentityFiles) == 0 && !cfg.UseAgent {
		bad("no credentials: set identity_files or use_agent")
	}
	var signers []ssh.Signer
	for _, path := range cfg.IdentityFiles {
		signer, err := readIdentityFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		signers = append(signers, signer)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &SSH{cfg: cfg, signers: signers, logger: logger.With("method", "ssh")}, nil
}

func readIdentityFile(path string) (ssh.Signer, error) {
	// Like OpenSSH, refuse a key that group or others can read.
	pem, err := secret.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading identity file: %w", err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	var missing *ssh.PassphraseMissingError
	if errors.As(err, &missing) {
		return nil, fmt.Errorf("identity file %s is encrypted; load it into an ssh-agent and set use_agent", path)
	}
	if err != nil {
		return nil, fmt.Errorf("parsing identity file %s: %w", path, err)
	}
	return signer, nil
}

// Name implements Method.
func (m *SSH) Name() string { return "ssh" }

// Fence implements Method. It returns nil only when the remote command exited
// with status 0, or, with KillPort, when nothing listens on the port anymore.
func (m *SSH) Fence(ctx context.Context, t Target) error {
	addr := m.cfg.Address
	if addr == "" {
		if t.Host == "" {
			return fmt.Errorf("target %q has no host", t.NodeID)
		}
		addr = net.JoinHostPort(t.Host, strconv.Itoa(m.cfg.Port))
	}
	dest := m.cfg.User + "@" + addr

	client, err := m.connect(ctx, addr, t)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", dest, err)
	}
	defer client.Close()

	// ssh has no contexts: closing the connection is what ends a hung
	// session request or remote command. Ask sshd to kill the command first,
	// so it does not outlive us on the target; best effort, as sshd without a
	// tty does not end the command when the connection goes, and OpenSSH
	// refuses signals in root sessions.
	var session atomic.Pointer[ssh.Session]
	stop := context.AfterFunc(ctx, func() {
		if s := session.Load(); s != nil {
			signaled := make(chan struct{})
			go func() {
				_ = s.Signal(ssh.SIGKILL)
				close(signaled)
			}()
			select {
			case <-signaled:
			case <-time.After(sshSignalGrace):
			}
		}
		client.Close()
	})
	defer stop()

	sess, err := client.NewSession()
	if err != nil {
		return fmt.Errorf("opening session on %s: %w", dest, ctxCauseOr(ctx, err))
	}
	defer sess.Close()
	session.Store(sess)

	if m.cfg.KillPort != 0 {
		return m.killPort(ctx, sess, dest, t)
	}
	return m.runCommand(ctx, sess, dest, t)
}

// connect dials addr and completes the SSH handshake within ConnectTimeout.
func (m *SSH) connect(ctx context.Context, addr string, t Target) (*ssh.Client, error) {
	timeout := m.cfg.ConnectTimeout
	ctx, cancel := context.WithTimeoutCause(ctx, timeout,
		fmt.Errorf("no ssh connection within connect timeout %s: %w", timeout, context.DeadlineExceeded))
	defer cancel()

	hostKeys, hostKeyAlgos, err := m.hostKeyCallback(addr, t)
	if err != nil {
		return nil, err
	}
	auth, closeAgent, err := m.authMethod(ctx)
	if err != nil {
		return nil, err
	}
	defer closeAgent()

	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, ctxCauseOr(ctx, err)
	}
	// A peer that accepts but never speaks would hang the handshake forever.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, &ssh.ClientConfig{
		User:              m.cfg.User,
		Auth:              []ssh.AuthMethod{auth},
		HostKeyCallback:   hostKeys,
		HostKeyAlgorithms: hostKeyAlgos,
	})
	if !stop() {
		// The timeout closed the connection; whatever the handshake said
		// after that, the reason is the timeout.
		if err == nil {
			c.Close()
		}
		return nil, context.Cause(ctx)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return ssh.NewClient(c, chans, reqs), nil
}

// hostKeyCallback re-reads the known_hosts file, so an operator's fix takes
// effect without a restart. It also returns the host key algorithms known for
// addr: without them the server may present another of its keys than the one
// on file, which would look like a changed key.
func (m *SSH) hostKeyCallback(addr string, t Target) (ssh.HostKeyCallback, []string, error) {
	if m.cfg.InsecureIgnoreHostKey {
		m.logger.Warn("ssh host key not verified", "target", t.NodeID, "addr", addr,
			"reason", "insecure_ignore_host_key is set")
		return ssh.InsecureIgnoreHostKey(), nil, nil
	}
	file := m.cfg.KnownHostsFile
	known, err := knownhosts.New(file)
	if err != nil {
		return nil, nil, fmt.Errorf("reading known hosts: %w", err)
	}
	check := func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := known(hostname, remote, key)
		var keyErr *knownhosts.KeyError
		var revoked *knownhosts.RevokedError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &keyErr) && len(keyErr.Want) == 0:
			return fmt.Errorf("host key of %s (%s %s) is unknown: add it to %s: %w",
				hostname, key.Type(), ssh.FingerprintSHA256(key), file, err)
		case errors.As(err, &keyErr):
			return fmt.Errorf("host key of %s (%s %s) does not match %s; the host was reinstalled or someone is impersonating it: %w",
				hostname, key.Type(), ssh.FingerprintSHA256(key), keyErr.Want[0].String(), err)
		case errors.As(err, &revoked):
			return fmt.Errorf("host key of %s is revoked in %s: %w", hostname, file, err)
		default:
			return fmt.Errorf("checking host key of %s: %w", hostname, err)
		}
	}
	return check, knownHostKeyAlgorithms(known, addr), nil
}

// probeKey is a throwaway key that no known_hosts file lists; checking it
// makes knownhosts tell which keys it does know for an address.
var probeKey = func() ssh.PublicKey {
	key, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		panic(err)
	}
	return key
}()

func knownHostKeyAlgorithms(known ssh.HostKeyCallback, addr string) []string {
	var keyErr *knownhosts.KeyError
	if err := known(addr, &net.TCPAddr{IP: net.IPv4zero}, probeKey); !errors.As(err, &keyErr) {
		return nil
	}
	var algos []string
	for _, k := range keyErr.Want {
		switch typ := k.Key.Type(); typ {
		case ssh.KeyAlgoRSA:
			algos = append(algos, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		default:
			algos = append(algos, typ)
		}
	}
	return slices.Compact(algos)
}

// authMethod offers the identity files' keys and then the agent's, as one
// method: the client tries each method name only once.
func (m *SSH) authMethod(ctx context.Context) (ssh.AuthMethod, func(), error) {
	signers := slices.Clone(m.signers)
	noop := func() {}
	if !m.cfg.UseAgent {
		return ssh.PublicKeys(signers...), noop, nil
	}
	sock := os.Getenv("SSH_AUTH_SOCK")
	if sock == "" {
		if len(signers) == 0 {
			return nil, noop, errors.New("use_agent is set but SSH_AUTH_SOCK is not")
		}
		m.logger.Warn("ssh agent not available", "reason", "SSH_AUTH_SOCK is not set")
		return ssh.PublicKeys(signers...), noop, nil
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, noop, fmt.Errorf("connecting to ssh agent: %w", ctxCauseOr(ctx, err))
	}
	// The agent signs during the handshake, so it stays open until then.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	closeAgent := func() {
		stop()
		conn.Close()
	}
	agentSigners, err := agent.NewClient(conn).Signers()
	if err != nil {
		closeAgent()
		return nil, noop, fmt.Errorf("listing ssh agent keys: %w", ctxCauseOr(ctx, err))
	}
	return ssh.PublicKeys(append(signers, agentSigners...)...), closeAgent, nil
}

// targetEnv is what a remote command may learn about its target.
func targetEnv(t Target) [][2]string {
	return [][2]string{
		{"FAILOVERD_TARGET_ID", t.NodeID},
		{"FAILOVERD_TARGET_HOST", t.Host},
		{"FAILOVERD_TARGET_ADMIN_URL", t.AdminURL},
		{"FAILOVERD_TARGET_EPOCH", strconv.FormatInt(t.Epoch, 10)},
	}
}

func (m *SSH) runCommand(ctx context.Context, sess *ssh.Session, dest string, t Target) error {
	for _, kv := range targetEnv(t) {
		// sshd refuses variables its AcceptEnv does not list; the command
		// then simply does not see them.
		_ = sess.Setenv(kv[0], kv[1])
	}
	stdout, stderr := &sshOutput{}, &sshOutput{}
	sess.Stdout, sess.Stderr = stdout, stderr
	err := sess.Run(m.cfg.Command)
	if err == nil {
		m.logger.Debug("ssh fence command succeeded", "target", t.NodeID, "epoch", t.Epoch, "dest", dest)
		return nil
	}
	return remoteError(ctx, "remote command on "+dest, err, stdout, stderr)
}

// remoteError explains why a remote command did not succeed. A timeout comes
// first: closing the connection also makes the command look as if it ended
// without an exit status.
func remoteError(ctx context.Context, what string, err error, stdout, stderr *sshOutput) error {
	var exitErr *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w%s", what, context.Cause(ctx), outputSuffix(stdout, stderr))
	case errors.As(err, &exitErr) && exitErr.Signal() != "":
		return fmt.Errorf("%s killed by signal %s%s: %w", what, exitErr.Signal(), outputSuffix(stdout, stderr), err)
	case errors.As(err, &exitErr):
		return fmt.Errorf("%s exited with status %d%s: %w", what, exitErr.ExitStatus(), outputSuffix(stdout, stderr), err)
	case errors.As(err, &missing):
		return fmt.Errorf("%s ended without an exit status%s: %w", what, outputSuffix(stdout, stderr), err)
	default:
		return fmt.Errorf("%s: %w", what, err)
	}
}

// Exit statuses of killPortScript other than 0.
const (
	killPortUnknown        = 10 // cannot tell what listens: no ss, no /proc/net/tcp
	killPortNoProcess      = 11 // something listens, but its process was not found
	killPortStillListening = 12 // killed, yet something still listens
)

// killPortScript kills whatever listens on a TCP port and then verifies that
// nothing does. It is sent on stdin to /bin/sh, so the remote login shell
// never parses it; the only data in it are the port number we validated and
// its hex form. It judges success by the port, not by the tools: Hadoop's
// sshfence counts "fuser missing" or "permission denied" as fenced, we don't.
const killPortScript = `set -u
port=@PORT@
hexport=@HEXPORT@

# proc_listeners prints the inodes of listening sockets on the port.
proc_listeners() {
	for f in /proc/net/tcp /proc/net/tcp6; do
		[ -r "$f" ] || continue
		while read -r _ local _ st _ _ _ _ _ inode _; do
			[ "$st" = 0A ] || continue
			case $local in
			*:"$hexport") echo "$inode" ;;
			esac
		done <"$f"
	done
}

# listeners prints the listening sockets on the port, nothing when there are
# none; it fails when it cannot tell.
listeners() {
	if out=$(ss -Htln "sport = :$port" </dev/null 2>/dev/null); then
		printf '%s' "$out"
		return 0
	fi
	[ -r /proc/net/tcp ] || return 1
	proc_listeners
}

# pids prints the processes holding a listening socket on the port.
pids() {
	found=
	if out=$(ss -Htlnp "sport = :$port" </dev/null 2>/dev/null); then
		rest=$out
		while :; do
			case $rest in
			*pid=*)
				rest=${rest#*pid=}
				found="$found ${rest%%[!0-9]*}"
				;;
			*) break ;;
			esac
		done
	fi
	if [ -z "$found" ] && command -v fuser >/dev/null 2>&1; then
		found=$(fuser -n tcp "$port" </dev/null 2>/dev/null)
	fi
	if [ -z "$found" ]; then
		# One ls instead of a readlink per descriptor: hosts have thousands.
		inodes=$(proc_listeners)
		if [ -n "$inodes" ]; then
			found=$(ls -l /proc/[0-9]*/fd 2>/dev/null | {
				pid=
				while read -r line; do
					case $line in
					/proc/*/fd: | /proc/*/fd/:)
						pid=${line#/proc/}
						pid=${pid%%/*}
						;;
					*" -> socket:["*"]")
						ino=${line##*" -> socket:["}
						ino=${ino%"]"}
						for want in $inodes; do
							if [ "$ino" = "$want" ]; then
								echo "$pid"
							fi
						done
						;;
					esac
				done
			})
		fi
	fi
	echo $found
}

if ! out=$(listeners); then
	echo "cannot tell what listens on tcp port $port: neither ss nor /proc/net/tcp is available" >&2
	exit 10
fi
if [ -z "$out" ]; then
	echo "result=not_listening"
	exit 0
fi
echo "listening on tcp port $port:" >&2
printf '%s\n' "$out" >&2
killed=
round=0
while [ "$round" -lt 10 ]; do
	round=$((round + 1))
	p=$(pids)
	if [ -n "$p" ]; then
		# SIGKILL: a fenced leader must stop now, not shut down gracefully.
		kill -9 $p || echo "kill -9 $p failed" >&2
		killed="$killed $p"
	fi
	sleep 0.2 2>/dev/null || sleep 1
	if ! out=$(listeners); then
		echo "cannot tell any more what listens on tcp port $port" >&2
		exit 10
	fi
	if [ -z "$out" ]; then
		echo "result=killed pids="$killed
		exit 0
	fi
done
echo "still listening on tcp port $port:" >&2
printf '%s\n' "$out" >&2
if [ -z "$killed" ]; then
	echo "found no process for the listener (missing ss and fuser, or no permission)" >&2
	exit 11
fi
exit 12
`

func killPortScriptFor(port int) string {
	return strings.NewReplacer(
		"@PORT@", strconv.Itoa(port),
		"@HEXPORT@", fmt.Sprintf("%04X", port),
	).Replace(killPortScript)
}

func (m *SSH) killPort(ctx context.Context, sess *ssh.Session, dest string, t Target) error {
	port := m.cfg.KillPort
	stdout, stderr := &sshOutput{}, &sshOutput{}
	sess.Stdin = strings.NewReader(killPortScriptFor(port))
	sess.Stdout, sess.Stderr = stdout, stderr
	what := fmt.Sprintf("killing listeners of tcp port %d on %s", port, dest)

	err := sess.Run("/bin/sh -s")
	var exitErr *ssh.ExitError
	if err != nil && ctx.Err() == nil && errors.As(err, &exitErr) && exitErr.Signal() == "" {
		switch exitErr.ExitStatus() {
		case killPortUnknown:
			return fmt.Errorf("%s: cannot tell what listens (no ss, no /proc/net/tcp)%s", what, outputSuffix(stdout, stderr))
		case killPortNoProcess:
			return fmt.Errorf("%s: found no process for the listener (ss and fuser missing or not permitted)%s", what, outputSuffix(stdout, stderr))
		case killPortStillListening:
			return fmt.Errorf("%s: port still has a listener after SIGKILL%s", what, outputSuffix(stdout, stderr))
		}
	}
	if err != nil {
		return remoteError(ctx, what, err, stdout, stderr)
	}

	result := lastLine(stdout.String())
	switch {
	case result == "result=not_listening":
		m.logger.Info("ssh kill_port found no listener, target already down",
			"target", t.NodeID, "epoch", t.Epoch, "dest", dest, "port", port)
		return nil
	case strings.HasPrefix(result, "result=killed"):
		pids := strings.TrimSpace(strings.TrimPrefix(result, "result=killed pids="))
		m.logger.Info("ssh kill_port killed listener",
			"target", t.NodeID, "epoch", t.Epoch, "dest", dest, "port", port, "pids", pids)
		return nil
	default:
		// Exit 0 without the script's verdict means something else ran.
		return fmt.Errorf("%s: no result from the remote script%s", what, outputSuffix(stdout, stderr))
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}

// sshOutput keeps the first sshOutputLimit bytes written to it and counts
// the rest.
type sshOutput struct {
	buf     bytes.Buffer
	dropped int64
}

func (o *sshOutput) Write(p []byte) (int, error) {
	keep := min(len(p), sshOutputLimit-o.buf.Len())
	o.buf.Write(p[:keep])
	o.dropped += int64(len(p) - keep)
	return len(p), nil
}

func (o *sshOutput) String() string {
	if o.dropped > 0 {
		return fmt.Sprintf("%s... (%d more bytes)", o.buf.String(), o.dropped)
	}
	return o.buf.String()
}

var _ io.Writer = (*sshOutput)(nil)

// outputSuffix formats remote output for an error message.
func outputSuffix(stdout, stderr *sshOutput) string {
	var b strings.Builder
	if s := strings.TrimSpace(stderr.String()); s != "" {
		fmt.Fprintf(&b, "; stderr: %q", s)
	}
	if s := strings.TrimSpace(stdout.String()); s != "" {
		fmt.Fprintf(&b, "; stdout: %q", s)
	}
	return b.String()
}

// ctxCauseOr reports why ctx ended, if it did, rather than the error an
// interrupted operation produced (a closed connection, "operation canceled").
func ctxCauseOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}
