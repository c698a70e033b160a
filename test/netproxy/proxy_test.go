package netproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo serves a line echo on a loopback port.
func echo(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return l.Addr().String()
}

// roundTrip sends a line and waits up to d for its echo.
func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) error {
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(d))
	_, err := r.ReadString('\n')
	return err
}

// A blackhole holds bytes on an open connection until it ends; a reset
// closes every connection; the target is looked up at each connect.
func TestBlackholeHoldsAndResetCloses(t *testing.T) {
	addr := echo(t)
	p := New(t, func() string { return addr })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.Blackhole(true)
	if err := roundTrip(c, r, 300*time.Millisecond); err == nil {
		t.Fatal("an answer during the blackhole")
	}
	p.Blackhole(false)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatalf("the held line after the blackhole: %v", err)
	}
	if n := p.Conns(); n != 2 {
		t.Errorf("%d connections tracked, want 2 (both sides)", n)
	}
	p.Reset()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("the connection survived a reset")
	}
}
