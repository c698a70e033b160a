package chaos

import (
	"os"
	"path/filepath"
)

// writeFileAtomic replaces path with data through a temporary file in
// its directory and a rename: a daemon that reads its config while the
// file is rewritten (a deferred restore right after a restart) reads the
// old or the new content, never a truncated file. A plain os.WriteFile
// there once left a restarted daemon reading an empty config ("config
// file is empty", exit 2) and the node down for the rest of the run.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), perm)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
