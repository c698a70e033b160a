// Package deb builds failoverd's Debian package (build.sh, make package);
// its test installs the package on this machine and removes it again.
package deb

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
)

const testVersion = "0.0~installtest"

// need fails the test under CI=true and skips it elsewhere.
func need(t *testing.T, ok bool, msg string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func sh(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func mustSh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := sh(t, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// owner returns "user:group mode" of a path.
func owner(t *testing.T, p string) string {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	u, err := user.LookupId(fmt.Sprint(st.Uid))
	if err != nil {
		t.Fatal(err)
	}
	g, err := user.LookupGroupId(fmt.Sprint(st.Gid))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s:%s %04o", u.Username, g.Name, fi.Mode().Perm())
}

// Paths the package installs or its scripts create; none may be left
// after a purge.
var packagePaths = []string{
	"/usr/bin/failoverd",
	"/lib/systemd/system/failoverd.service",
	"/etc/failoverd",
	"/var/lib/failoverd",
	"/var/log/failoverd",
	"/usr/share/man/man1/failoverd.1.gz",
	"/usr/share/bash-completion/completions/failoverd",
	"/usr/share/doc/failoverd",
	"/etc/systemd/system/failoverd.service",
}

// TestPackageInstallsValidatesAndPurges builds the .deb with build.sh,
// installs it with dpkg -i on this machine (root only), and checks what an
// operator gets: the failoverd user, its directories, the config as a
// conffile readable by the daemon, a unit systemd-analyze verify accepts,
// the man page and the completion; then that failoverd validate, run as
// the unit runs it, accepts the installed config once the files it names
// exist; then removes and purges the package and requires every trace
// gone. Whatever happens, the package is purged and what the test added
// is removed.
func TestPackageInstallsValidatesAndPurges(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and installs a package")
	}
	for _, tool := range []string{"dpkg", "dpkg-deb", "systemd-analyze", "adduser", "runuser", "man"} {
		_, err := exec.LookPath(tool)
		need(t, err == nil, tool+" not found: this test needs a Debian system")
	}
	need(t, os.Geteuid() == 0, "installing a package needs root")
	// Never touch a machine where failoverd is installed for real.
	if out, err := sh(t, "dpkg-query", "-W", "-f=${Status}", "failoverd"); err == nil && !strings.Contains(out, "not-installed") {
		t.Fatalf("the failoverd package is already on this machine (%s); the test will not replace it", out)
	}
	for _, p := range packagePaths {
		if exists(p) {
			t.Fatalf("%s exists without the package; the test will not overwrite it", p)
		}
	}
	_, err := user.Lookup("failoverd")
	userExisted := err == nil

	// Build.
	dist := t.TempDir()
	cmd := exec.Command("./build.sh", dist)
	// gzip: xz takes minutes on a loaded machine, and the compression is
	// dpkg's business, not what this test checks.
	cmd.Env = append(os.Environ(), "VERSION="+testVersion, "COMPRESS=gzip")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build.sh: %v\n%s", err, stderr.String())
	}
	deb := strings.TrimSpace(string(out))
	if !strings.HasSuffix(deb, ".deb") || !exists(deb) {
		t.Fatalf("build.sh printed %q, not a .deb it wrote", deb)
	}
	if conf := mustSh(t, "dpkg-deb", "-f", deb, "Version"); strings.TrimSpace(conf) != testVersion {
		t.Errorf("package version %q, want %s", conf, testVersion)
	}
	if cf := mustSh(t, "dpkg-deb", "--info", deb, "conffiles"); strings.TrimSpace(cf) != "/etc/failoverd/failoverd.yaml" {
		t.Errorf("conffiles: %q, want /etc/failoverd/failoverd.yaml", cf)
	}

	// Files the test adds for validate (those the reference config names
	// and an operator provides), removed before the purge and again at
	// the end whatever happened.
	var created []string
	removeCreated := func() {
		for i := len(created) - 1; i >= 0; i-- {
			os.Remove(created[i])
		}
		created = nil
	}
	t.Cleanup(func() {
		removeCreated()
		if out, err := sh(t, "dpkg", "--purge", "failoverd"); err != nil {
			t.Errorf("cleanup: dpkg --purge: %v\n%s", err, out)
		}
		if !userExisted {
			if _, err := user.Lookup("failoverd"); err == nil {
				if out, err := sh(t, "deluser", "--system", "--quiet", "failoverd"); err != nil {
					t.Errorf("cleanup: deluser: %v\n%s", err, out)
				}
			}
			if _, err := user.LookupGroup("failoverd"); err == nil {
				if out, err := sh(t, "delgroup", "--system", "--quiet", "failoverd"); err != nil {
					t.Errorf("cleanup: delgroup: %v\n%s", err, out)
				}
			}
		}
	})

	// Install.
	t.Logf("dpkg -i %s", filepath.Base(deb))
	mustSh(t, "dpkg", "-i", deb)
	if st := mustSh(t, "dpkg-query", "-W", "-f=${Status} ${Version}", "failoverd"); st != "install ok installed "+testVersion {
		t.Fatalf("dpkg-query: %q", st)
	}
	if v := mustSh(t, "/usr/bin/failoverd", "version"); strings.TrimSpace(v) != "failoverd "+testVersion {
		t.Errorf("failoverd version: %q", v)
	}
	if cf := mustSh(t, "dpkg-query", "-W", "-f=${Conffiles}", "failoverd"); !strings.Contains(cf, "/etc/failoverd/failoverd.yaml") {
		t.Errorf("conffiles: %q, want /etc/failoverd/failoverd.yaml", cf)
	}
	u, err := user.Lookup("failoverd")
	if err != nil {
		t.Fatalf("no failoverd user after install: %v", err)
	}
	if pw := mustSh(t, "getent", "passwd", "failoverd"); !strings.HasSuffix(strings.TrimSpace(pw), ":/usr/sbin/nologin") {
		t.Errorf("failoverd user: %q, want the shell /usr/sbin/nologin", pw)
	}
	for p, want := range map[string]string{
		"/etc/failoverd":                "root:failoverd 0750",
		"/etc/failoverd/failoverd.yaml": "root:failoverd 0640",
		"/var/lib/failoverd":            "failoverd:failoverd 0750",
		"/var/log/failoverd":            "failoverd:failoverd 0750",
		"/usr/bin/failoverd":            "root:root 0755",
	} {
		if got := owner(t, p); got != want {
			t.Errorf("%s: %s, want %s", p, got, want)
		}
	}
	ref, err := os.ReadFile("../../configs/failoverd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile("/etc/failoverd/failoverd.yaml"); !bytes.Equal(got, ref) {
		t.Error("/etc/failoverd/failoverd.yaml is not configs/failoverd.yaml")
	}

	// The unit: systemd's own checks (syntax, the executables exist, the
	// user is known...), and the package's paths.
	if out, err := sh(t, "systemd-analyze", "verify", "/lib/systemd/system/failoverd.service"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	unit, err := os.ReadFile("/lib/systemd/system/failoverd.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"ExecStartPre=/usr/bin/failoverd validate -c /etc/failoverd/failoverd.yaml",
		"ExecStart=/usr/bin/failoverd run -c /etc/failoverd/failoverd.yaml",
		"ExecReload=/bin/kill -HUP $MAINPID",
		"User=failoverd", "StateDirectory=failoverd", "LogsDirectory=failoverd",
		"RestartSec=200ms",
	} {
		if !slices.Contains(strings.Split(string(unit), "\n"), line) {
			t.Errorf("installed unit lacks the line %q", line)
		}
	}
	if exists("/etc/systemd/system/multi-user.target.wants/failoverd.service") {
		t.Error("the package enabled the unit; it must wait for the config to be edited")
	}

	// Man page and completion.
	if page := mustSh(t, "man", "-l", "/usr/share/man/man1/failoverd.1.gz"); !strings.Contains(page, "failoverd validate") {
		t.Errorf("man page does not show failoverd validate:\n%s", page)
	}
	comp := `source /usr/share/bash-completion/completions/failoverd; COMP_WORDS=(failoverd val); COMP_CWORD=1; _failoverd; echo "${COMPREPLY[*]}"`
	if got := strings.TrimSpace(mustSh(t, "bash", "-c", comp)); got != "validate" {
		t.Errorf("completion of 'failoverd val': %q, want validate", got)
	}

	// validate, as the unit's ExecStartPre runs it (user failoverd). The
	// reference config is static to check (no ZooKeeper reached) but names
	// files an operator provides: the admin token, ZooKeeper credentials,
	// the ssh key and known_hosts, the hook and fence programs. Fresh from
	// the package, validate must refuse exactly for those, then accept the
	// config once they exist.
	validate := func() (string, error) {
		return sh(t, "runuser", "-u", "failoverd", "--", "/usr/bin/failoverd", "validate", "-c", "/etc/failoverd/failoverd.yaml")
	}
	out2, err := validate()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("validate of the fresh config: %v, want exit 2 for the missing files\n%s", err, out2)
	}
	missing := regexp.MustCompile(`(?m)^[a-z_.\[\]0-9]+: file not found: (/\S+)$`)
	var want []string
	for _, m := range missing.FindAllStringSubmatch(out2, -1) {
		if !slices.Contains(want, m[1]) {
			want = append(want, m[1])
		}
	}
	sort.Strings(want)
	lines := strings.Split(strings.TrimSpace(out2), "\n")
	if len(lines) < 2 || len(missing.FindAllString(out2, -1)) != len(lines)-1 {
		t.Fatalf("validate of the fresh config reported more than missing files:\n%s", out2)
	}
	expected := []string{
		"/etc/failoverd/id_ed25519", "/etc/failoverd/known_hosts", "/etc/failoverd/token", "/etc/failoverd/zk.cred",
		"/usr/local/bin/demote", "/usr/local/bin/fence", "/usr/local/bin/promote",
	}
	if !slices.Equal(want, expected) {
		t.Fatalf("validate reported missing %v, want %v\n%s", want, expected, out2)
	}
	uid, gid := atoi(t, u.Uid), atoi(t, u.Gid)
	for _, p := range want {
		if exists(p) {
			t.Fatalf("%s exists although validate said it does not", p)
		}
		created = append(created, p)
		if strings.HasPrefix(p, "/etc/failoverd/") {
			// Secrets: the daemon's, owner-only, as failoverd demands.
			if err := os.WriteFile(p, []byte("secret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The reference config draws two warnings (a loopback admin address
	// beside a non-loopback node.host, tick_time unset), on stderr before
	// the "ok".
	if out, err := validate(); err != nil || !slices.Contains(strings.Split(out, "\n"), "ok") {
		t.Fatalf("validate of the installed config with its files present: %v\n%s", err, out)
	}

	// Remove: the program goes, the conffile stays.
	removeCreated()
	mustSh(t, "dpkg", "--remove", "failoverd")
	if exists("/usr/bin/failoverd") || exists("/lib/systemd/system/failoverd.service") {
		t.Error("dpkg --remove left the binary or the unit")
	}
	if !exists("/etc/failoverd/failoverd.yaml") {
		t.Error("dpkg --remove removed the conffile; only purge may")
	}
	// Purge: nothing left.
	mustSh(t, "dpkg", "--purge", "failoverd")
	if out, err := sh(t, "dpkg-query", "-W", "-f=${Status}", "failoverd"); err == nil && !strings.Contains(out, "not-installed") {
		t.Errorf("after purge dpkg-query says %q", out)
	}
	for _, p := range packagePaths {
		if exists(p) {
			t.Errorf("%s left after purge", p)
		}
	}
	filepath.WalkDir("/var/lib/systemd", func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), "failoverd") {
			t.Errorf("%s left after purge", p)
		}
		return nil
	})
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}
