// Package secret reads files that hold secrets (bearer tokens, ZooKeeper
// credentials, ssh and TLS private keys) and refuses those that anyone but
// their owner may read or write.
//
// A secret file that group or others can read has already leaked to every
// account on the host, and one they can write lets them swap a key or token.
// Like OpenSSH does for private keys, failoverd refuses such files with an
// error that names the file, its mode and the fix (chmod 600 FILE), rather
// than carrying on with a secret it cannot trust.
//
// The permissions are those of the file itself (symbolic links are followed)
// and are checked on the open file, so the file checked is the file read.
package secret

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
)

// Secret is a value read from a secret file (a bearer token, credentials).
// It never prints: String, GoString, MarshalYAML, MarshalJSON and LogValue
// all give "<secret>". Use Reveal (or string(s)) only where the value is
// sent on the wire.
type Secret string

const redacted = "<secret>"

// String returns "<secret>".
func (Secret) String() string { return redacted }

// GoString returns "<secret>", so %#v does not print it either.
func (Secret) GoString() string { return redacted }

// MarshalYAML returns "<secret>".
func (Secret) MarshalYAML() (any, error) { return redacted, nil }

// MarshalJSON returns "<secret>" as a JSON string.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// LogValue returns "<secret>" for log/slog.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// Reveal returns the secret itself.
func (s Secret) Reveal() string { return string(s) }

// MaxSize bounds how much ReadFile reads. Tokens, credentials and keys are a
// few kilobytes; anything larger is not a secret file but a mistake.
const MaxSize = 1 << 20

// PermissionError reports a secret file that group or others may access.
type PermissionError struct {
	Path string
	Mode fs.FileMode // permission bits of the file
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("secret file %s is accessible by group or others (mode %04o); "+
		"it must be readable by its owner only: run chmod 600 %s", e.Path, uint32(e.Mode), e.Path)
}

// CheckMode returns a *PermissionError if mode grants group or others any
// access. It does not look at the file system; path only names the file in
// the error.
func CheckMode(path string, mode fs.FileMode) error {
	if perm := mode.Perm(); perm&0o077 != 0 {
		return &PermissionError{Path: path, Mode: perm}
	}
	return nil
}

// Check opens path and checks that it is a regular file that only its owner
// may access. Config validation uses it to report every bad secret file at
// once; ReadFile checks again when the file is read.
func Check(path string) error {
	f, err := open(path)
	if err != nil {
		return err
	}
	return f.Close()
}

// ReadFile checks path like Check, then returns its contents.
func ReadFile(path string) ([]byte, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading secret file %s: %w", path, err)
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("secret file %s is larger than %d bytes", path, MaxSize)
	}
	return b, nil
}

// open opens path and checks the open file's type and permissions.
func open(path string) (*os.File, error) {
	if path == "" {
		return nil, errors.New("secret file: no file name")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err // *fs.PathError names the file
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	switch {
	case fi.IsDir():
		f.Close()
		return nil, fmt.Errorf("secret file %s is a directory", path)
	case !fi.Mode().IsRegular():
		f.Close()
		return nil, fmt.Errorf("secret file %s is not a regular file", path)
	}
	if err := CheckMode(path, fi.Mode()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
