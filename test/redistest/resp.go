package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Conn is a minimal RESP2 client, enough for the tests' probes and checks:
// one command at a time, replies as Go values. The write probes run every
// 20 ms against every Redis, so they keep a connection instead of forking
// redis-cli.
type Conn struct {
	addr    string
	timeout time.Duration
	c       net.Conn
	r       *bufio.Reader
}

// ErrorReply is a Redis error reply ("-READONLY ...").
type ErrorReply string

func (e ErrorReply) Error() string { return string(e) }

// Dial connects to a Redis at addr; every later command must complete
// within timeout.
func Dial(addr string, timeout time.Duration) (*Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &Conn{addr: addr, timeout: timeout, c: c, r: bufio.NewReader(c)}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Do sends one command and reads its reply: string (simple or bulk),
// int64, nil (null bulk), []any, or an ErrorReply as the error. Any other
// error (I/O, timeout, protocol) leaves the connection unusable.
func (c *Conn) Do(args ...string) (any, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := c.c.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(c.c, b.String()); err != nil {
		return nil, err
	}
	return c.read()
}

func (c *Conn) read() (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("resp: empty line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, ErrorReply(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return nil, fmt.Errorf("resp: bad bulk length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return nil, fmt.Errorf("resp: bad array length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = c.read(); err != nil {
				var er ErrorReply
				if !errors.As(err, &er) {
					return nil, err
				}
				out[i] = er
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("resp: unknown reply type %q", line)
}

// Command runs one command on a fresh connection to addr.
func Command(addr string, timeout time.Duration, args ...string) (any, error) {
	c, err := Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Do(args...)
}

// Role is what ROLE says about one Redis.
type Role struct {
	Role       string // master, slave; "" when it did not answer
	MasterAddr string // a replica's primary, host:port
	Link       string // a replica's link state: connect, connecting, sync, connected
	Err        error
}

// Follows reports whether this is a replica of addr with its link up.
func (r Role) Follows(addr string) bool {
	return r.Role == "slave" && r.MasterAddr == addr && r.Link == "connected"
}

func (r Role) String() string {
	switch {
	case r.Err != nil:
		return "unreachable (" + r.Err.Error() + ")"
	case r.Role == "slave":
		return fmt.Sprintf("replica of %s (%s)", r.MasterAddr, r.Link)
	}
	return r.Role
}

// ReadRole asks the Redis at addr for its ROLE.
func ReadRole(addr string) Role {
	v, err := Command(addr, 2*time.Second, "ROLE")
	if err != nil {
		return Role{Err: err}
	}
	a, ok := v.([]any)
	if !ok || len(a) == 0 {
		return Role{Err: fmt.Errorf("ROLE answered %v", v)}
	}
	r := Role{}
	r.Role, _ = a[0].(string)
	if r.Role == "slave" && len(a) >= 4 {
		host, _ := a[1].(string)
		port, _ := a[2].(int64)
		r.MasterAddr = net.JoinHostPort(host, strconv.FormatInt(port, 10))
		r.Link, _ = a[3].(string)
	}
	return r
}
