package fencer

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/failoverd/failoverd/test/sshtest"
)

// sshLogBuffer collects log output written from several goroutines.
type sshLogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *sshLogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *sshLogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func sshTestLogger() (*slog.Logger, *sshLogBuffer) {
	buf := &sshLogBuffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// newSSHFor builds an SSH method that logs into srv with its authorized key
// and verifies its host key; adjust changes the config before NewSSH.
func newSSHFor(t *testing.T, srv *sshtest.Server, adjust func(*SSHConfig)) (*SSH, *sshLogBuffer) {
	t.Helper()
	cfg := SSHConfig{
		User:           srv.User,
		Address:        srv.Addr,
		IdentityFiles:  []string{srv.UserKeyFile},
		KnownHostsFile: srv.KnownHostsFile,
		ConnectTimeout: 20 * time.Second, // generous: CI machines are small and loaded
		Command:        "true",
	}
	if adjust != nil {
		adjust(&cfg)
	}
	logger, logs := sshTestLogger()
	m, err := NewSSH(cfg, Deps{Logger: logger})
	if err != nil {
		t.Fatalf("NewSSH: %v", err)
	}
	return m, logs
}

var sshTarget = Target{NodeID: "node-a", Host: "127.0.0.1", AdminURL: "http://127.0.0.1:1", Epoch: 7}

func TestSSHCommandExitStatus(t *testing.T) {
	srv := sshtest.Start(t)
	for _, tc := range []struct {
		name       string
		command    string
		wantStatus int // -1: success
		wantInErr  string
	}{
		{"exit 0 is fenced", "exit 0", -1, ""},
		{"exit 3 is not fenced", "exit 3", 3, "exited with status 3"},
		{"stderr is in the error", "echo cannot reach service >&2; exit 1", 1, "cannot reach service"},
		{"stdout is in the error", "echo still running; exit 2", 2, "still running"},
		{"killed by a signal", "kill -9 $$", -2, "killed by signal KILL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newSSHFor(t, srv, func(c *SSHConfig) { c.Command = tc.command })
			err := m.Fence(t.Context(), sshTarget)
			if tc.wantStatus == -1 {
				if err != nil {
					t.Fatalf("Fence() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Fence() = nil, want an error containing %q", tc.wantInErr)
			}
			if !strings.Contains(err.Error(), tc.wantInErr) {
				t.Errorf("Fence() = %v, want it to contain %q", err, tc.wantInErr)
			}
			var exitErr *ssh.ExitError
			if !errors.As(err, &exitErr) {
				t.Fatalf("Fence() = %v, want it to wrap *ssh.ExitError", err)
			}
			if tc.wantStatus >= 0 && exitErr.ExitStatus() != tc.wantStatus {
				t.Errorf("exit status = %d, want %d", exitErr.ExitStatus(), tc.wantStatus)
			}
		})
	}
}

func TestSSHCommandOutputIsBounded(t *testing.T) {
	srv := sshtest.Start(t)
	m, _ := newSSHFor(t, srv, func(c *SSHConfig) {
		c.Command = "head -c 1000000 /dev/zero | tr '\\0' x; exit 1"
	})
	err := m.Fence(t.Context(), sshTarget)
	if err == nil {
		t.Fatal("Fence() = nil, want an error")
	}
	if len(err.Error()) > 3*sshOutputLimit {
		t.Errorf("error is %d bytes long, want it bounded near %d", len(err.Error()), sshOutputLimit)
	}
	if !strings.Contains(err.Error(), "more bytes") {
		t.Errorf("Fence() = %.200s..., want it to say output was dropped", err)
	}
}

func TestSSHCommandSeesTargetOnlyThroughEnv(t *testing.T) {
	srv := sshtest.Start(t, sshtest.WithConfig("AcceptEnv FAILOVERD_*"))
	target := Target{NodeID: `node-a"; exit 9; "`, Host: "127.0.0.1", AdminURL: "http://h:1/$(exit 9)", Epoch: 42}
	command := `test "$FAILOVERD_TARGET_ID" = 'node-a"; exit 9; "' &&
		test "$FAILOVERD_TARGET_HOST" = 127.0.0.1 &&
		test "$FAILOVERD_TARGET_ADMIN_URL" = 'http://h:1/$(exit 9)' &&
		test "$FAILOVERD_TARGET_EPOCH" = 42`
	m, _ := newSSHFor(t, srv, func(c *SSHConfig) { c.Command = command })
	if err := m.Fence(t.Context(), target); err != nil {
		t.Fatalf("Fence() = %v, want nil", err)
	}
}

func TestSSHCommandHangIsCutAtTimeout(t *testing.T) {
	srv := sshtest.Start(t)
	m, _ := newSSHFor(t, srv, func(c *SSHConfig) { c.Command = "sleep 60" })

	// Long enough to log in on a loaded machine, so the cut hits the command.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	start := time.Now()
	err := m.Fence(ctx, sshTarget)
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "remote command") {
		t.Fatalf("Fence() = %v, want the remote command cut by context.DeadlineExceeded", err)
	}
	if elapsed > 13*time.Second {
		t.Errorf("Fence() took %s with a 3s timeout", elapsed)
	}
}

func TestSSHHostKeyVerified(t *testing.T) {
	srv := sshtest.Start(t)
	for _, tc := range []struct {
		name       string
		knownHosts string
		wantKnown  bool // the host was known, with another key
		wantInErr  string
	}{
		{"changed host key", srv.WrongHostKeyKnownHostsFile(t), true, "does not match"},
		{"unknown host", srv.EmptyKnownHostsFile(t), false, "is unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newSSHFor(t, srv, func(c *SSHConfig) { c.KnownHostsFile = tc.knownHosts })
			err := m.Fence(t.Context(), sshTarget)
			var keyErr *knownhosts.KeyError
			if !errors.As(err, &keyErr) {
				t.Fatalf("Fence() = %v, want a *knownhosts.KeyError", err)
			}
			if got := len(keyErr.Want) > 0; got != tc.wantKnown {
				t.Errorf("host known = %v, want %v (err %v)", got, tc.wantKnown, err)
			}
			if !strings.Contains(err.Error(), tc.wantInErr) {
				t.Errorf("Fence() = %v, want it to contain %q", err, tc.wantInErr)
			}
		})
	}
}

func TestSSHWrongUserKeyRefused(t *testing.T) {
	srv := sshtest.Start(t)
	m, _ := newSSHFor(t, srv, func(c *SSHConfig) { c.IdentityFiles = []string{srv.UnauthorizedKeyFile} })
	err := m.Fence(t.Context(), sshTarget)
	if err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Fatalf("Fence() = %v, want an authentication error", err)
	}
}

func TestSSHInsecureIgnoreHostKeyWarnsEveryTime(t *testing.T) {
	srv := sshtest.Start(t)
	m, logs := newSSHFor(t, srv, func(c *SSHConfig) {
		c.KnownHostsFile = ""
		c.InsecureIgnoreHostKey = true
	})
	for range 2 {
		if err := m.Fence(t.Context(), sshTarget); err != nil {
			t.Fatalf("Fence() = %v, want nil", err)
		}
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\"ssh host key not verified\""); n != 2 {
		t.Errorf("got %d host key warnings, want 2; logs:\n%s", n, logs)
	}
}

// TestSSHHelperListener is not a test: TestSSHKillPort runs the test binary
// with FENCER_SSH_TEST_LISTENER=1 to get a process that listens on a port.
func TestSSHHelperListener(t *testing.T) {
	if os.Getenv("FENCER_SSH_TEST_LISTENER") != "1" {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error=" + err.Error())
		os.Exit(1)
	}
	fmt.Printf("port=%d\n", ln.Addr().(*net.TCPAddr).Port)
	for {
		conn, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		conn.Close()
	}
}

// startListenerProcess runs a process that listens on a loopback port and
// returns the port and a channel that yields its exit state.
func startListenerProcess(t *testing.T) (int, <-chan *os.ProcessState) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSSHHelperListener$", "-test.count=1")
	cmd.Env = append(os.Environ(), "FENCER_SSH_TEST_LISTENER=1")
	// A test binary killed by -timeout runs no cleanups; don't leave this behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan *os.ProcessState, 1)
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
		_ = cmd.Wait()
		exited <- cmd.ProcessState
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	select {
	case line := <-lines:
		port, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "port=")))
		if err != nil {
			t.Fatalf("listener process said %q, want port=N", line)
		}
		return port, exited
	case <-time.After(30 * time.Second):
		t.Fatal("listener process did not report its port within 30s")
		return 0, nil
	}
}

func TestSSHKillPort(t *testing.T) {
	srv := sshtest.Start(t)
	port, exited := startListenerProcess(t)
	m, logs := newSSHFor(t, srv, func(c *SSHConfig) {
		c.Command = ""
		c.KillPort = port
	})

	if err := m.Fence(t.Context(), sshTarget); err != nil {
		t.Fatalf("Fence() = %v, want nil", err)
	}
	select {
	case state := <-exited:
		ws, ok := state.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("listener process ended with %v, want killed by SIGKILL", state)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("listener process still running 10s after Fence returned nil")
	}
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second); err == nil {
		conn.Close()
		t.Errorf("port %d still accepts connections after Fence returned nil", port)
	}
	if !strings.Contains(logs.String(), "ssh kill_port killed listener") {
		t.Errorf("logs do not report the kill:\n%s", logs)
	}
}

func TestSSHKillPortNothingListening(t *testing.T) {
	srv := sshtest.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	m, logs := newSSHFor(t, srv, func(c *SSHConfig) {
		c.Command = ""
		c.KillPort = port
	})

	if err := m.Fence(t.Context(), sshTarget); err != nil {
		t.Fatalf("Fence() = %v, want nil (nothing listens, the old leader is down)", err)
	}
	if !strings.Contains(logs.String(), "ssh kill_port found no listener") {
		t.Errorf("logs do not say nothing was listening:\n%s", logs)
	}
}

// TestSSHKillPortScriptTools runs the kill_port script locally with a PATH
// that offers only some tools, so each way of finding the listener's process
// is exercised, and so is the case where none works: that must fail, not count
// as fenced (Hadoop's sshfence gets this wrong).
func TestSSHKillPortScriptTools(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tools     []string
		wantKill  bool
		wantExit  int
		wantInOut string
	}{
		{"ss", []string{"ss"}, true, 0, "result=killed pids="},
		{"fuser", []string{"fuser"}, true, 0, "result=killed pids="},
		{"proc", []string{"ls"}, true, 0, "result=killed pids="},
		{"no way to find the process", nil, false, killPortNoProcess, "found no process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port, exited := startListenerProcess(t)
			binDir := t.TempDir()
			for _, tool := range append([]string{"sleep", "kill"}, tc.tools...) {
				path, err := exec.LookPath(tool)
				if err != nil {
					t.Fatalf("looking up %s: %v", tool, err)
				}
				if err := os.Symlink(path, binDir+"/"+tool); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("/bin/sh", "-s")
			cmd.Env = []string{"PATH=" + binDir}
			cmd.Stdin = strings.NewReader(killPortScriptFor(port))
			out, err := cmd.CombinedOutput()
			exit := 0
			if exitErr := (*exec.ExitError)(nil); errors.As(err, &exitErr) {
				exit = exitErr.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if exit != tc.wantExit || !strings.Contains(string(out), tc.wantInOut) {
				t.Fatalf("kill_port script exited %d, want %d with %q in its output:\n%s", exit, tc.wantExit, tc.wantInOut, out)
			}
			if !tc.wantKill {
				select {
				case state := <-exited:
					t.Errorf("listener process ended (%v), want it alive", state)
				default:
				}
				return
			}
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				t.Fatal("listener process still running 10s after the script succeeded")
			}
		})
	}
}

func TestSSHHungHandshakeEndsWithTimeout(t *testing.T) {
	// A peer that accepts TCP connections and never says a word.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		conns.Wait()
	})
	conns.Go(func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	})

	for _, tc := range []struct {
		name           string
		connectTimeout time.Duration
		fenceTimeout   time.Duration
		wantInErr      string
	}{
		{"connect timeout", 500 * time.Millisecond, time.Minute, "connect timeout 500ms"},
		{"fence timeout", time.Minute, 500 * time.Millisecond, "deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewSSH(SSHConfig{
				User:                  "root",
				Address:               ln.Addr().String(),
				IdentityFiles:         []string{writeTestKey(t)},
				InsecureIgnoreHostKey: true,
				ConnectTimeout:        tc.connectTimeout,
				Command:               "true",
			}, Deps{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), tc.fenceTimeout)
			defer cancel()
			start := time.Now()
			err = m.Fence(ctx, sshTarget)
			elapsed := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), tc.wantInErr) {
				t.Fatalf("Fence() = %v, want a timeout mentioning %q", err, tc.wantInErr)
			}
			if elapsed > 10*time.Second {
				t.Errorf("Fence() took %s, want about 500ms", elapsed)
			}
		})
	}
}

func TestSSHTargetWithoutHost(t *testing.T) {
	m, err := NewSSH(SSHConfig{
		User:                  "root",
		IdentityFiles:         []string{writeTestKey(t)},
		InsecureIgnoreHostKey: true,
		Command:               "true",
	}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Fence(t.Context(), Target{NodeID: "node-a"})
	if err == nil || !strings.Contains(err.Error(), "has no host") {
		t.Fatalf("Fence() = %v, want a no-host error", err)
	}
}

func TestNewSSHValidates(t *testing.T) {
	key := writeTestKey(t)
	knownHosts := t.TempDir() + "/known_hosts"
	if err := os.WriteFile(knownHosts, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	encrypted := writeTestKeyWithPassphrase(t, []byte("secret"))
	shared := writeTestKey(t)
	if err := os.Chmod(shared, 0o644); err != nil {
		t.Fatal(err)
	}
	valid := func() SSHConfig {
		return SSHConfig{User: "root", IdentityFiles: []string{key}, KnownHostsFile: knownHosts, Command: "true"}
	}
	for _, tc := range []struct {
		name      string
		adjust    func(*SSHConfig)
		wantInErr string // "" means valid
	}{
		{"valid", func(*SSHConfig) {}, ""},
		{"agent only", func(c *SSHConfig) { c.IdentityFiles, c.UseAgent = nil, true }, ""},
		{"no user", func(c *SSHConfig) { c.User = "" }, "user is required"},
		{"bad port", func(c *SSHConfig) { c.Port = 70000 }, "port must be in 1..65535"},
		{"bad address", func(c *SSHConfig) { c.Address = "no-port" }, "must be host:port"},
		{"negative connect timeout", func(c *SSHConfig) { c.ConnectTimeout = -time.Second }, "connect timeout must be > 0"},
		{"no action", func(c *SSHConfig) { c.Command = "" }, "one of command and kill_port is required"},
		{"two actions", func(c *SSHConfig) { c.KillPort = 8080 }, "mutually exclusive"},
		{"bad kill port", func(c *SSHConfig) { c.Command, c.KillPort = "", 70000 }, "kill_port must be in 1..65535"},
		{"kill the ssh port", func(c *SSHConfig) { c.Command, c.KillPort = "", 22 }, "is the ssh port itself"},
		{"no host key policy", func(c *SSHConfig) { c.KnownHostsFile = "" }, "known_hosts_file is required"},
		{"both host key policies", func(c *SSHConfig) { c.InsecureIgnoreHostKey = true }, "mutually exclusive"},
		{"missing known hosts", func(c *SSHConfig) { c.KnownHostsFile = "/nonexistent/known_hosts" }, "reading known hosts"},
		{"no credentials", func(c *SSHConfig) { c.IdentityFiles = nil }, "no credentials"},
		{"missing identity file", func(c *SSHConfig) { c.IdentityFiles = []string{"/nonexistent/id"} }, "reading identity file"},
		{"encrypted identity file", func(c *SSHConfig) { c.IdentityFiles = []string{encrypted} }, "is encrypted"},
		{"identity file others can read", func(c *SSHConfig) { c.IdentityFiles = []string{shared} }, "chmod 600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid()
			tc.adjust(&cfg)
			m, err := NewSSH(cfg, Deps{})
			if tc.wantInErr == "" {
				if err != nil {
					t.Fatalf("NewSSH() = %v, want nil", err)
				}
				if m.cfg.Port != DefaultSSHPort || m.cfg.ConnectTimeout != DefaultSSHConnectTimeout {
					t.Errorf("defaults: port %d, connect timeout %s", m.cfg.Port, m.cfg.ConnectTimeout)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
				t.Fatalf("NewSSH() = %v, want an error containing %q", err, tc.wantInErr)
			}
		})
	}
}

func TestSSHKnownHostKeyAlgorithms(t *testing.T) {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := ssh.NewPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/known_hosts"
	line := knownhosts.Line([]string{"[10.0.0.1]:2222"}, rsaKey) + "\n"
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	known, err := knownhosts.New(path)
	if err != nil {
		t.Fatal(err)
	}
	got := knownHostKeyAlgorithms(known, "10.0.0.1:2222")
	want := []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("knownHostKeyAlgorithms() = %v, want %v", got, want)
	}
	if got := knownHostKeyAlgorithms(known, "10.0.0.2:22"); got != nil {
		t.Errorf("knownHostKeyAlgorithms(unknown host) = %v, want nil", got)
	}
}

// writeTestKey writes a new unencrypted ed25519 private key and returns its path.
func writeTestKey(t *testing.T) string {
	t.Helper()
	return writeTestKeyWithPassphrase(t, nil)
}

func writeTestKeyWithPassphrase(t *testing.T, passphrase []byte) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var block *pem.Block
	if passphrase == nil {
		block, err = ssh.MarshalPrivateKey(priv, "test")
	} else {
		block, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "test", passphrase)
	}
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/id_ed25519"
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startInProcessSSH runs an x/crypto/ssh server on loopback that accepts any
// client and hands every "exec" request to onExec, for cases a real sshd does
// not produce on demand. It returns the address and a known_hosts file for it.
func startInProcessSSH(t *testing.T, onExec func(ch ssh.Channel, req *ssh.Request)) (string, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(hostKey)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { serveInProcessSSH(c, cfg, onExec) })
		}
	})

	addr := ln.Addr().String()
	knownHostsFile := t.TempDir() + "/known_hosts"
	line := knownhosts.Line([]string{knownhosts.Normalize(addr)}, hostKey.PublicKey()) + "\n"
	if err := os.WriteFile(knownHostsFile, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	return addr, knownHostsFile
}

func serveInProcessSSH(c net.Conn, cfg *ssh.ServerConfig, onExec func(ssh.Channel, *ssh.Request)) {
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "sessions only")
			continue
		}
		ch, chReqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go func() {
			for req := range chReqs {
				if req.Type == "exec" {
					onExec(ch, req)
					continue
				}
				_ = req.Reply(false, nil) // env and anything else
			}
		}()
	}
}

func TestSSHExitStatusMappingInProcess(t *testing.T) {
	exitWith := func(status uint32) func(ssh.Channel, *ssh.Request) {
		return func(ch ssh.Channel, req *ssh.Request) {
			_ = req.Reply(true, nil)
			_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
			ch.Close()
		}
	}
	for _, tc := range []struct {
		name      string
		onExec    func(ssh.Channel, *ssh.Request)
		timeout   time.Duration
		wantErrIs error  // nil: see wantInErr
		wantInErr string // "" and nil wantErrIs: success
	}{
		{"status 0", exitWith(0), time.Minute, nil, ""},
		{"status 3", exitWith(3), time.Minute, nil, "exited with status 3"},
		{"no exit status", func(ch ssh.Channel, req *ssh.Request) {
			_ = req.Reply(true, nil)
			_, _ = io.WriteString(ch.Stderr(), "lost my way")
			ch.Close()
		}, time.Minute, nil, `ended without an exit status; stderr: "lost my way"`},
		{"exec never answered", func(ssh.Channel, *ssh.Request) {}, 500 * time.Millisecond, context.DeadlineExceeded, ""},
		{"command never ends", func(_ ssh.Channel, req *ssh.Request) { _ = req.Reply(true, nil) },
			500 * time.Millisecond, context.DeadlineExceeded, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, knownHostsFile := startInProcessSSH(t, tc.onExec)
			m, err := NewSSH(SSHConfig{
				User:           "fencer",
				Address:        addr,
				IdentityFiles:  []string{writeTestKey(t)},
				KnownHostsFile: knownHostsFile,
				Command:        "stop-service",
			}, Deps{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), tc.timeout)
			defer cancel()
			err = m.Fence(ctx, sshTarget)
			switch {
			case tc.wantErrIs != nil:
				if !errors.Is(err, tc.wantErrIs) {
					t.Fatalf("Fence() = %v, want %v", err, tc.wantErrIs)
				}
			case tc.wantInErr == "":
				if err != nil {
					t.Fatalf("Fence() = %v, want nil", err)
				}
			default:
				if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
					t.Fatalf("Fence() = %v, want an error containing %q", err, tc.wantInErr)
				}
			}
		})
	}
}

func TestSSHUseAgent(t *testing.T) {
	srv := sshtest.Start(t)
	pem, err := os.ReadFile(srv.UserKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ssh.ParseRawPrivateKey(pem)
	if err != nil {
		t.Fatal(err)
	}
	keyring := agent.NewKeyring()
	if err := keyring.Add(agent.AddedKey{PrivateKey: key}); err != nil {
		t.Fatal(err)
	}
	// Unix socket paths are short; t.TempDir() names can be too long.
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", dir+"/sock")
	if err != nil {
		t.Fatal(err)
	}
	var served sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		served.Wait()
	})
	served.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			served.Go(func() {
				defer c.Close()
				_ = agent.ServeAgent(keyring, c)
			})
		}
	})
	t.Setenv("SSH_AUTH_SOCK", dir+"/sock")

	// The identity file is not authorized, so only the agent's key can get in.
	m, _ := newSSHFor(t, srv, func(c *SSHConfig) {
		c.IdentityFiles = []string{srv.UnauthorizedKeyFile}
		c.UseAgent = true
	})
	if err := m.Fence(t.Context(), sshTarget); err != nil {
		t.Fatalf("Fence() = %v, want nil", err)
	}
}
