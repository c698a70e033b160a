package pgtest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/failoverd/failoverd/adminapi"
)

// Writer inserts one row per transaction (autocommit) into pgtest_rows on
// the primary that `failoverd leader --watch --json` names, as an
// application would, and records which ids the server acknowledged.
type Writer struct {
	c    *Cluster
	cmd  *exec.Cmd
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	leader  string // the address leader --watch printed last
	acks    []Ack
	inDoubt []int64 // failed inserts: may have committed or not
	next    int64
}

// Ack is one acknowledged insert.
type Ack struct {
	ID   int64
	At   time.Time
	Addr string
}

// StartWriter creates the table on the current leader and starts writing.
func (c *Cluster) StartWriter(via *Node) *Writer {
	c.T().Helper()
	l := c.WaitSettled("", 120*time.Second)
	if _, err := Query1(l.ServiceAddr, "CREATE TABLE IF NOT EXISTS pgtest_rows (id bigint PRIMARY KEY, at timestamptz DEFAULT now())", 60*time.Second); err != nil {
		c.T().Fatalf("creating pgtest_rows on %s: %v", l.ID, err)
	}
	w := &Writer{c: c, stop: make(chan struct{}), done: make(chan struct{}), next: 1}
	w.cmd = exec.Command(failoverd(c.T()), "leader", "-c", via.Config, "--watch", "--json")
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		c.T().Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		c.T().Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l adminapi.Leader
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				w.mu.Lock()
				w.leader = l.ServiceAddress
				w.mu.Unlock()
			}
		}
	}()
	c.T().Cleanup(func() { w.Stop() })
	go w.run()
	return w
}

func (w *Writer) run() {
	defer close(w.done)
	var conn *Conn
	var addr string
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		w.mu.Lock()
		want := w.leader
		w.mu.Unlock()
		if conn != nil && want != addr {
			conn.Close()
			conn = nil
		}
		if conn == nil {
			if want == "" {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			c, err := Dial(want, "postgres", 2*time.Second)
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			// A commit waits for a synchronous standby: while none follows
			// the new primary, as long as that takes.
			c.to = 60 * time.Second
			conn, addr = c, want
		}
		id := w.next
		w.next++
		_, err := conn.Query("INSERT INTO pgtest_rows (id) VALUES (" + strconv.FormatInt(id, 10) + ")")
		w.mu.Lock()
		if err == nil {
			w.acks = append(w.acks, Ack{ID: id, At: time.Now(), Addr: addr})
		} else {
			w.inDoubt = append(w.inDoubt, id)
		}
		w.mu.Unlock()
		if err != nil {
			var se *ServerError
			if !errors.As(err, &se) || !strings.HasPrefix(se.Code, "23") {
				conn.Close()
				conn = nil
			}
			time.Sleep(20 * time.Millisecond)
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// Stop stops the writer and its leader --watch (idempotent).
func (w *Writer) Stop() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	if w.cmd.Process != nil {
		w.cmd.Process.Kill()
		w.cmd.Wait()
	}
}

// Acks is a copy of the acknowledged inserts so far.
func (w *Writer) Acks() []Ack {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Ack(nil), w.acks...)
}

// InDoubt is how many inserts failed (committed or not: unknown).
func (w *Writer) InDoubt() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.inDoubt)
}

// Outage is the longest time without an acknowledged insert between from
// and the first ack after to (from itself counts as an ack's time).
func Outage(acks []Ack, from, to time.Time) time.Duration {
	prev := from
	var longest time.Duration
	for _, a := range acks {
		if !a.At.After(from) {
			continue
		}
		if d := a.At.Sub(prev); d > longest {
			longest = d
		}
		prev = a.At
		if a.At.After(to) {
			break
		}
	}
	return longest
}

// WaitAcks waits until the writer has at least n acknowledged inserts
// after since (on the PostgreSQL at addr only, unless addr is "").
func (w *Writer) WaitAcks(since time.Time, n int, timeout time.Duration, addr ...string) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		got := 0
		for _, a := range w.Acks() {
			if a.At.After(since) && (len(addr) == 0 || a.Addr == addr[0]) {
				got++
			}
		}
		if got >= n {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// Missing returns the acknowledged ids that node's PostgreSQL does not
// have.
func Missing(n *Node, acks []Ack) ([]int64, error) {
	c, err := Dial(n.ServiceAddr, "postgres", 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.to = 60 * time.Second
	rows, err := c.Query("SELECT id FROM pgtest_rows")
	if err != nil {
		return nil, err
	}
	have := make(map[int64]bool, len(rows))
	for _, r := range rows {
		id, _ := strconv.ParseInt(r[0], 10, 64)
		have[id] = true
	}
	var missing []int64
	for _, a := range acks {
		if !have[a.ID] {
			missing = append(missing, a.ID)
		}
	}
	return missing, nil
}

// Sample is one probe of one node.
type Sample struct {
	Node     string
	Sent     time.Time
	Answered time.Time
	Writable bool // answered pg_is_in_recovery() = false
}

// Prober asks every node's PostgreSQL every interval whether it is a
// primary.
type Prober struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	samples []Sample
}

// StartProber starts a prober.
func (c *Cluster) StartProber(every time.Duration) *Prober {
	p := &Prober{stop: make(chan struct{})}
	for _, n := range c.Nodes {
		p.wg.Add(1)
		go p.probe(n, every)
	}
	c.T().Cleanup(p.Stop)
	return p
}

func (p *Prober) probe(n *Node, every time.Duration) {
	defer p.wg.Done()
	var conn *Conn
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			if conn != nil {
				conn.Close()
			}
			return
		case <-t.C:
		}
		sent := time.Now()
		if conn == nil {
			c, err := Dial(n.ServiceAddr, "postgres", time.Second)
			if err != nil {
				p.add(Sample{Node: n.ID, Sent: sent, Answered: time.Now()})
				continue
			}
			conn = c
			sent = time.Now()
		}
		rows, err := conn.Query("SELECT pg_is_in_recovery()")
		s := Sample{Node: n.ID, Sent: sent, Answered: time.Now()}
		if err != nil {
			conn.Close()
			conn = nil
		} else if len(rows) == 1 && rows[0][0] == "f" {
			s.Writable = true
		}
		p.add(s)
	}
}

func (p *Prober) add(s Sample) {
	p.mu.Lock()
	p.samples = append(p.samples, s)
	p.mu.Unlock()
}

// Stop stops the prober (idempotent).
func (p *Prober) Stop() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
}

// Samples is a copy of the samples so far.
func (p *Prober) Samples() []Sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Sample(nil), p.samples...)
}

// Span is a time during which one node was certainly writable: from the
// answer of the first of a run of writable samples to the sending of the
// last (the server answered "primary" at some moment between a query's
// sending and its answer).
type Span struct {
	Node       string
	From, To   time.Time
	FirstSeen  time.Time // the first writable sample's sending
	LastSeenTo time.Time // the last writable sample's answer
}

// Spans are every node's writable runs.
func Spans(samples []Sample) []Span {
	byNode := map[string][]Sample{}
	for _, s := range samples {
		byNode[s.Node] = append(byNode[s.Node], s)
	}
	var out []Span
	for node, ss := range byNode {
		sort.Slice(ss, func(i, j int) bool { return ss[i].Sent.Before(ss[j].Sent) })
		for i := 0; i < len(ss); {
			if !ss[i].Writable {
				i++
				continue
			}
			j := i
			for j+1 < len(ss) && ss[j+1].Writable {
				j++
			}
			out = append(out, Span{Node: node, From: ss[i].Answered, To: ss[j].Sent, FirstSeen: ss[i].Sent, LastSeenTo: ss[j].Answered})
			i = j + 1
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FirstSeen.Before(out[j].FirstSeen) })
	return out
}

// Dual is a time two nodes were certainly writable at once.
type Dual struct {
	A, B     string
	From, To time.Time
}

func (d Dual) String() string {
	return fmt.Sprintf("%s and %s both writable from %s for %v", d.A, d.B, d.From.Format("15:04:05.000"), d.To.Sub(d.From).Round(time.Millisecond))
}

// Duals are the overlaps of two nodes' certain spans.
func Duals(samples []Sample) []Dual {
	sp := Spans(samples)
	var out []Dual
	for i := range sp {
		for j := i + 1; j < len(sp); j++ {
			a, b := sp[i], sp[j]
			if a.Node == b.Node {
				continue
			}
			from, to := later(a.From, b.From), earlier(a.To, b.To)
			if from.Before(to) {
				out = append(out, Dual{A: a.Node, B: b.Node, From: from, To: to})
			}
		}
	}
	return out
}

// NoPrimary is the longest time, between from and to, during which no
// sample showed any node writable (from the last writable answer before a
// gap to the first writable answer after it).
func NoPrimary(samples []Sample, from, to time.Time) time.Duration {
	var ws []time.Time
	for _, s := range samples {
		if s.Writable {
			ws = append(ws, s.Answered)
		}
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].Before(ws[j]) })
	prev := from
	var longest time.Duration
	for _, w := range ws {
		if w.Before(from) {
			continue
		}
		if d := w.Sub(prev); d > longest {
			longest = d
		}
		prev = w
		if w.After(to) {
			break
		}
	}
	return longest
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
