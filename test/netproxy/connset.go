package netproxy

import (
	"net"
	"sync"
)

// ConnSet holds a proxy's open connections (both sides of each proxied
// connection), so that a Reset or Close can cut them all at once. Its zero
// value is ready to use.
type ConnSet struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// Add tracks c until it is removed or closed by CloseAll.
func (s *ConnSet) Add(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
}

// Remove stops tracking connections that were closed otherwise.
func (s *ConnSet) Remove(cs ...net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range cs {
		delete(s.conns, c)
	}
}

// Len is the number of tracked connections.
func (s *ConnSet) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// CloseAll closes every tracked connection and stops tracking it.
func (s *ConnSet) CloseAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
	clear(s.conns)
}
