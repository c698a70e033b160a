package pgtest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Conn is a minimal PostgreSQL client: protocol 3.0, trust authentication
// only, the simple query protocol, text results. Enough for the probes and
// the writer, without a driver dependency.
type Conn struct {
	c  net.Conn
	r  *bufio.Reader
	to time.Duration
}

// ServerError is an ErrorResponse from the server.
type ServerError struct{ Code, Message string }

func (e *ServerError) Error() string { return e.Code + ": " + e.Message }

// Dial connects to addr as user to database postgres; each round trip is
// bounded by timeout.
func Dial(addr, user string, timeout time.Duration) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	c := &Conn{c: nc, r: bufio.NewReader(nc), to: timeout}
	var body []byte
	body = binary.BigEndian.AppendUint32(body, 196608) // 3.0
	for _, kv := range [][2]string{{"user", user}, {"database", "postgres"}, {"application_name", "pgtest"}} {
		body = append(append(append(append(body, kv[0]...), 0), kv[1]...), 0)
	}
	body = append(body, 0)
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(body)+4))
	nc.SetDeadline(time.Now().Add(timeout))
	if _, err := nc.Write(append(msg, body...)); err != nil {
		nc.Close()
		return nil, err
	}
	for {
		t, b, err := c.read()
		if err != nil {
			nc.Close()
			return nil, err
		}
		switch t {
		case 'R':
			if len(b) < 4 || binary.BigEndian.Uint32(b) != 0 {
				nc.Close()
				return nil, errors.New("pgtest: the server wants a password (only trust authentication is supported)")
			}
		case 'E':
			nc.Close()
			return nil, parseError(b)
		case 'Z':
			return c, nil
		}
	}
}

func (c *Conn) read() (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(h[1:])) - 4
	if n < 0 || n > 64<<20 {
		return 0, nil, fmt.Errorf("pgtest: bad message length %d", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.r, b); err != nil {
		return 0, nil, err
	}
	return h[0], b, nil
}

func parseError(b []byte) error {
	e := &ServerError{}
	for len(b) > 1 {
		f := b[0]
		i := strings.IndexByte(string(b[1:]), 0)
		if i < 0 {
			break
		}
		v := string(b[1 : 1+i])
		switch f {
		case 'C':
			e.Code = v
		case 'M':
			e.Message = v
		}
		b = b[2+i:]
	}
	return e
}

// Query runs sql (one or more statements) and returns the rows of the
// last result as text (NULL as ""). A server error is a *ServerError; the
// connection stays usable after one.
func (c *Conn) Query(sql string) ([][]string, error) {
	c.c.SetDeadline(time.Now().Add(c.to))
	msg := append([]byte{'Q'}, binary.BigEndian.AppendUint32(nil, uint32(len(sql)+5))...)
	msg = append(append(msg, sql...), 0)
	if _, err := c.c.Write(msg); err != nil {
		return nil, err
	}
	var rows [][]string
	var qerr error
	for {
		t, b, err := c.read()
		if err != nil {
			return nil, err
		}
		switch t {
		case 'T':
			rows = nil
		case 'D':
			if len(b) < 2 {
				return nil, errors.New("pgtest: short DataRow")
			}
			n := int(binary.BigEndian.Uint16(b))
			b = b[2:]
			row := make([]string, 0, n)
			for i := 0; i < n; i++ {
				if len(b) < 4 {
					return nil, errors.New("pgtest: short DataRow")
				}
				l := int(int32(binary.BigEndian.Uint32(b)))
				b = b[4:]
				if l < 0 {
					row = append(row, "")
					continue
				}
				if len(b) < l {
					return nil, errors.New("pgtest: short DataRow")
				}
				row = append(row, string(b[:l]))
				b = b[l:]
			}
			rows = append(rows, row)
		case 'E':
			qerr = parseError(b)
		case 'Z':
			return rows, qerr
		}
	}
}

// Close ends the session.
func (c *Conn) Close() error {
	c.c.SetDeadline(time.Now().Add(time.Second))
	c.c.Write([]byte{'X', 0, 0, 0, 4})
	return c.c.Close()
}

// Query1 dials addr, runs sql and returns the first column of the first
// row ("" when none).
func Query1(addr, sql string, timeout time.Duration) (string, error) {
	c, err := Dial(addr, "postgres", timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	rows, err := c.Query(sql)
	if err != nil || len(rows) == 0 || len(rows[0]) == 0 {
		return "", err
	}
	return rows[0][0], nil
}
