package sshtest_test

import (
	"net"
	"os"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/failoverd/failoverd/test/sshtest"
)

func dial(t *testing.T, s *sshtest.Server, keyFile, knownHostsFile string) (*ssh.Client, error) {
	t.Helper()
	pem, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		t.Fatal(err)
	}
	hostKeys, err := knownhosts.New(knownHostsFile)
	if err != nil {
		t.Fatal(err)
	}
	return ssh.Dial("tcp", s.Addr, &ssh.ClientConfig{
		User:            s.User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: hostKeys,
	})
}

func TestStart(t *testing.T) {
	s := sshtest.Start(t)
	if host, _, _ := net.SplitHostPort(s.Addr); host != "127.0.0.1" {
		t.Fatalf("Addr = %q, want a 127.0.0.1 address", s.Addr)
	}

	client, err := dial(t, s, s.UserKeyFile, s.KnownHostsFile)
	if err != nil {
		t.Fatalf("dial with the authorized key: %v", err)
	}
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	out, err := sess.Output("echo hello")
	if err != nil || strings.TrimSpace(string(out)) != "hello" {
		t.Fatalf("echo hello = %q, %v; want \"hello\", nil", out, err)
	}
}

func TestStartRefuses(t *testing.T) {
	s := sshtest.Start(t)
	for _, tc := range []struct {
		name       string
		keyFile    func() string
		knownHosts func() string
		wantErr    string
	}{
		{"unauthorized key", func() string { return s.UnauthorizedKeyFile }, func() string { return s.KnownHostsFile }, "unable to authenticate"},
		{"wrong host key", func() string { return s.UserKeyFile }, func() string { return s.WrongHostKeyKnownHostsFile(t) }, "key mismatch"},
		{"unknown host", func() string { return s.UserKeyFile }, func() string { return s.EmptyKnownHostsFile(t) }, "key is unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, err := dial(t, s, tc.keyFile(), tc.knownHosts())
			if err == nil {
				client.Close()
				t.Fatal("dial succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("dial error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}
