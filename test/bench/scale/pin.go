//go:build scale

package scale

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
)

// Pinning (SCALE_PIN, on by default where there are at least 2 CPUs):
// the coordination servers run on the first half of the CPUs, the driver
// (every member, and the calibration daemons it starts) on the rest, so
// the servers' CPU figures are not the driver's contention. taskset -a
// sets every thread of a process; threads started later inherit their
// creator's set. A server restarted by the driver would inherit the
// driver's set, so startServer pins it again.
var pinning = os.Getenv("SCALE_PIN") != "0" && runtime.NumCPU() >= 2

// cpuSets are the servers' and the driver's CPU lists for taskset.
func cpuSets() (servers, driver string) {
	n := runtime.NumCPU()
	h := n / 2
	list := func(from, to int) string {
		if to-from == 1 {
			return strconv.Itoa(from)
		}
		return fmt.Sprintf("%d-%d", from, to-1)
	}
	return list(0, h), list(h, n)
}

func taskset(pid int, cpus string) error {
	out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset %s %d: %v: %s", cpus, pid, err, out)
	}
	return nil
}

// pin puts the servers on their CPUs and the driver on its own; it does
// nothing when pinning is off.
func (e *ensemble) pin() error {
	if !pinning {
		return nil
	}
	s, d := cpuSets()
	for _, pid := range e.pids() {
		if err := taskset(pid, s); err != nil {
			return err
		}
	}
	return taskset(os.Getpid(), d)
}

// pinDesc says how the run was pinned, for the results.
func pinDesc() string {
	if !pinning {
		return "not pinned"
	}
	s, d := cpuSets()
	return "servers on CPU " + s + ", the driver (every member, and the calibration daemons) on CPU " + d
}
