package zk

// This file is a failoverd addition to go-zookeeper v1.0.4 (see README.md).

// WithBeforeSetWatches returns a connection option for tests: fn runs on the
// connection's event loop each time a connection to a server is established
// (session handshake done, send and receive loops running), just before the
// client re-registers its watches on it with SetWatches. While fn blocks,
// requests are sent and answered on the new connection but the watches are
// not re-registered yet; tests use that to make a reply arrive first.
// Production code must not use it.
func WithBeforeSetWatches(fn func()) connOption {
	return func(c *Conn) {
		c.beforeSetWatches = fn
	}
}
