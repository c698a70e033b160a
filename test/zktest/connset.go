package zktest

import (
	"net"
	"sync"
)

// connSet holds a proxy's open connections (both sides of each proxied
// connection), so that a Reset or Close can cut them all at once. Its zero
// value is ready to use.
type connSet struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// add tracks c until it is removed or closed by closeAll.
func (s *connSet) add(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
}

// remove stops tracking connections that were closed otherwise.
func (s *connSet) remove(cs ...net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range cs {
		delete(s.conns, c)
	}
}

// len is the number of tracked connections.
func (s *connSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// closeAll closes every tracked connection and stops tracking it.
func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
	clear(s.conns)
}
