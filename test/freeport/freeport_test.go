package freeport

import (
	"net"
	"os/exec"
	"strconv"
	"testing"
)

// A port one test holds is not handed out again, to this process or to
// another one, until that test ends.
func TestReservedUntilTheTestEnds(t *testing.T) {
	var held []int
	t.Run("holder", func(t *testing.T) {
		held = Take(t, 3)
		for _, p := range held {
			f, err := reserve(p)
			if err == nil {
				f.Close()
				t.Errorf("port %d reserved twice in one process", p)
			}
			// Another process: flock(1) on the same file.
			if err := exec.Command("flock", "-n", Dir+"/"+strconv.Itoa(p), "true").Run(); err == nil {
				t.Errorf("port %d: another process took its lock", p)
			}
		}
	})
	for _, p := range held {
		f, err := reserve(p)
		if err != nil {
			t.Errorf("port %d still reserved after its test ended: %v", p, err)
			continue
		}
		f.Close()
	}
}

// A port something else listens on is not handed out.
func TestSkipsPortsInUse(t *testing.T) {
	var ls []net.Listener
	for p := lo; p < hi; p++ {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			ls = append(ls, l)
		}
		if len(ls) == 2000 {
			break
		}
	}
	busy := map[int]bool{}
	for _, l := range ls {
		busy[l.Addr().(*net.TCPAddr).Port] = true
		defer l.Close()
	}
	for _, p := range Take(t, 50) {
		if busy[p] {
			t.Errorf("port %d is in use but was handed out", p)
		}
	}
}
