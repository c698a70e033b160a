// Command etcd is etcd's server, built from the release of
// go.etcd.io/etcd/server/v3 this module pins, for failoverd's tests
// (scripts/deps.sh builds it into a cache directory; test/etcdtest runs
// it next to Debian's etcd-server). It is its own module, so that the
// daemon's module never requires the server.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
