// Package freeport hands out loopback ports for servers a test starts
// later (ZooKeeper, etcd, sshd, failoverd's admin API).
//
// A port handed out by listening on :0 comes from the kernel's ephemeral
// range (ip_local_port_range starts at 32768 by default) and is closed
// again before the server binds it, so any outgoing connection on the
// machine could take it in between. Ports are therefore drawn at random
// from below that range and checked by binding them. That alone does not
// keep test processes apart: `go test ./...` runs packages side by side,
// and a JVM takes seconds to bind the port it was given, long enough for
// another process to draw and check the same one; a client of the first
// test then talks to the second test's server. Each port handed out is
// therefore also reserved for the test's lifetime by an exclusive flock
// on a file named after it in a shared directory, which every test
// process on the machine checks first; the kernel drops the lock when the
// process exits, however it exits.
package freeport

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Ports are drawn from [lo, hi): below the default ephemeral range.
const lo, hi = 20000, 32768

// Dir holds one lock file per reserved port.
var Dir = filepath.Join(os.TempDir(), "failoverd-test-ports")

// Take returns n loopback ports that were free when checked and that no
// other test (in this process or another) is handed out until t ends.
func Take(t testing.TB, n int) []int {
	t.Helper()
	// Shared by every user's tests: world-writable and sticky, like /tmp.
	if err := os.MkdirAll(Dir, 0o777); err != nil {
		t.Fatalf("port reservations: %v", err)
	}
	if fi, err := os.Stat(Dir); err == nil && fi.Mode().Perm() != 0o777 {
		os.Chmod(Dir, 0o1777) // fails unless ours: then its owner set it up
	}
	var ports []int
	seen := map[int]bool{}
	for tries := 0; len(ports) < n; tries++ {
		if tries > 2000 {
			t.Fatalf("no %d free loopback ports in [%d, %d)", n, lo, hi)
		}
		p := lo + rand.IntN(hi-lo)
		if seen[p] {
			continue
		}
		seen[p] = true
		f, err := reserve(p)
		if err != nil {
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue // another test holds it
			}
			t.Fatalf("reserving port %d: %v", p, err)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			f.Close() // taken by something that is not a test of ours
			continue
		}
		l.Close()
		t.Cleanup(func() { f.Close() })
		ports = append(ports, p)
	}
	return ports
}

// reserve takes the exclusive lock of port p without waiting; the lock
// lasts until the returned file is closed or the process ends.
func reserve(p int) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(Dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDONLY, 0o444)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
