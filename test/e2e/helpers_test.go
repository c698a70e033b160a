package e2e

import (
	"errors"
	"os/exec"
)

func runCmd(bin string, args ...string) (string, int) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		return err.Error(), -1
	}
	return string(out), 0
}
