package healthcheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/failoverd/failoverd/internal/proc"
)

// bodyLimit bounds how much of an HTTP response is read and searched.
const bodyLimit = 64 << 10

// httpClient is shared by all HTTP checks. It never follows redirects (a 3xx
// is not healthy), never uses a proxy from the environment (the service is
// local) and opens a new connection for every check, so that a service that
// no longer accepts connections is not hidden behind an old one.
var httpClient = &http.Client{
	Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{}).DialContext,
	},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// HTTP checks a service with a GET request. It is healthy on a 2xx status
// whose body contains ExpectBody. A bad status or body is Unhealthy; no
// response (refused, reset, timeout) is NotResponding.
type HTTP struct {
	URL string
	// ExpectBody, if not empty, must occur in the first 64 KiB of the body.
	ExpectBody string
	// Timeout bounds one request; zero leaves it to the caller's context.
	Timeout time.Duration
}

// Check implements Checker.
func (h HTTP) Check(ctx context.Context) error {
	ctx, cancel := withTimeout(ctx, h.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL, nil)
	if err != nil {
		return fmt.Errorf("building request for %q: %w", h.URL, err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return &NotRespondingError{Err: err} // *url.Error names the method and URL
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, bodyLimit))
	if err != nil {
		return &NotRespondingError{Err: fmt.Errorf("GET %s: reading body: %w", h.URL, err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s: status %s, body %q", h.URL, resp.Status, snippet(body))
	}
	if h.ExpectBody != "" && !bytes.Contains(body, []byte(h.ExpectBody)) {
		return fmt.Errorf("GET %s: body does not contain %q, body %q", h.URL, h.ExpectBody, snippet(body))
	}
	return nil
}

// TCP checks that something accepts connections on Address (host:port).
// Failure to connect is NotResponding; there is no Unhealthy answer.
type TCP struct {
	Address string
	// Timeout bounds the connect; zero leaves it to the caller's context.
	Timeout time.Duration
}

// Check implements Checker.
func (c TCP) Check(ctx context.Context) error {
	ctx, cancel := withTimeout(ctx, c.Timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.Address)
	if err != nil {
		return &NotRespondingError{Err: err} // *net.OpError names the address
	}
	_ = conn.Close() // connecting was the check
	return nil
}

// Exec checks by running a command (argv, no shell) through package
// internal/proc. Exit status 0 is healthy; any other status is Unhealthy, with
// the tail of the output in the error. A command that cannot be started, times
// out or is canceled is NotResponding; on timeout its whole process group is
// killed.
type Exec struct {
	Argv []string
	// Env holds extra KEY=VALUE pairs for the command.
	Env []string
	// Timeout bounds one run; zero leaves it to the caller's context.
	Timeout time.Duration
	// KillGrace is how long the command may take to exit after SIGTERM
	// before SIGKILL. Default proc.DefaultKillGrace.
	KillGrace time.Duration
}

// Check implements Checker.
func (e Exec) Check(ctx context.Context) error {
	_, err := proc.Run(ctx, proc.Spec{
		Argv:      e.Argv,
		Env:       e.Env,
		Timeout:   e.Timeout,
		KillGrace: e.KillGrace,
	})
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*proc.ExitError](err); ok {
		return err // it answered, and the answer was no
	}
	return &NotRespondingError{Err: err}
}

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// snippet shortens a response body for an error message.
func snippet(body []byte) string {
	const max = 256
	body = bytes.TrimSpace(body)
	if len(body) > max {
		return string(body[:max]) + "..."
	}
	return string(body)
}
