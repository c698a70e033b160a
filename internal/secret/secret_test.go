package secret

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, name string, mode fs.FileMode, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	// Chmod, because WriteFile's mode is filtered by the umask.
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadFileAcceptsOwnerOnly(t *testing.T) {
	for _, mode := range []fs.FileMode{0o600, 0o400, 0o700} {
		p := write(t, "token", mode, "s3cret\n")
		b, err := ReadFile(p)
		if err != nil || string(b) != "s3cret\n" {
			t.Errorf("mode %04o: ReadFile = %q, %v; want the contents", mode, b, err)
		}
		if err := Check(p); err != nil {
			t.Errorf("mode %04o: Check = %v", mode, err)
		}
	}
}

func TestReadFileRefusesGroupOrOthers(t *testing.T) {
	for _, mode := range []fs.FileMode{0o644, 0o640, 0o604, 0o620, 0o602, 0o666, 0o610, 0o601} {
		p := write(t, "id_ed25519", mode, "key")
		b, err := ReadFile(p)
		if b != nil {
			t.Errorf("mode %04o: ReadFile returned the contents", mode)
		}
		var pe *PermissionError
		if !errors.As(err, &pe) || pe.Path != p || pe.Mode != mode {
			t.Fatalf("mode %04o: ReadFile error = %v, want a *PermissionError for %s", mode, err, p)
		}
		msg := err.Error()
		for _, want := range []string{p, fmt.Sprintf("(mode %04o)", uint32(mode)), "chmod 600 " + p} {
			if !strings.Contains(msg, want) {
				t.Errorf("mode %04o: error %q does not contain %q", mode, msg, want)
			}
		}
		if err := Check(p); !errors.As(err, &pe) {
			t.Errorf("mode %04o: Check = %v, want a *PermissionError", mode, err)
		}
	}
}

func TestReadFileMessage(t *testing.T) {
	p := write(t, "token", 0o644, "x")
	_, err := ReadFile(p)
	want := "secret file " + p + " is accessible by group or others (mode 0644); it must be readable by its owner only: run chmod 600 " + p
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant    %s", err, want)
	}
}

// TestSymlink checks the mode of the file the link points to: a link's own
// mode (0777 on Linux) says nothing.
func TestSymlink(t *testing.T) {
	target := write(t, "token", 0o600, "x")
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(link); err != nil {
		t.Errorf("ReadFile(link to 0600 file) = %v", err)
	}
	if err := os.Chmod(target, 0o644); err != nil {
		t.Fatal(err)
	}
	var pe *PermissionError
	if _, err := ReadFile(link); !errors.As(err, &pe) {
		t.Errorf("ReadFile(link to 0644 file) = %v, want a *PermissionError", err)
	}
}

func TestNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("ReadFile(dir) = %v, want 'is a directory'", err)
	}
	if _, err := ReadFile("/dev/null"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("ReadFile(/dev/null) = %v, want 'not a regular file'", err)
	}
}

func TestMissingFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "absent")
	if _, err := ReadFile(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile(absent) = %v, want fs.ErrNotExist", err)
	}
	if _, err := ReadFile(""); err == nil {
		t.Error("ReadFile(\"\") succeeded")
	}
}

func TestTooLarge(t *testing.T) {
	p := write(t, "big", 0o600, strings.Repeat("x", MaxSize+1))
	if _, err := ReadFile(p); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("ReadFile(big) = %v, want a size error", err)
	}
}
