package redistest

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Probe is one write attempt on one Redis: SET was sent at Sent and its
// reply read at Done. Accepted means the reply was OK, so that Redis
// accepted a write at some instant within [Sent, Done].
type Probe struct {
	Node     string
	Sent     time.Time
	Done     time.Time
	Accepted bool
	Reply    string // OK, the error reply, or the I/O error
}

// Prober writes to every Redis of a cluster every interval, each from its
// own goroutine on its own connection (redialled after an error), and
// records every attempt.
type Prober struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	log  []Probe
}

// StartProber starts probing every node's Redis every interval.
func (c *Cluster) StartProber(interval time.Duration) *Prober {
	p := &Prober{stop: make(chan struct{})}
	for _, n := range c.Nodes {
		p.wg.Add(1)
		go p.run(n.ID, n.ServiceAddr, interval)
	}
	c.T().Cleanup(p.Stop)
	return p
}

func (p *Prober) run(id, addr string, interval time.Duration) {
	defer p.wg.Done()
	var conn *Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		pr := Probe{Node: id, Sent: time.Now()}
		var err error
		if conn == nil {
			conn, err = Dial(addr, time.Second)
		}
		if err == nil {
			var v any
			v, err = conn.Do("SET", "probe:"+id, strconv.Itoa(seq))
			if err == nil {
				pr.Accepted = v == "OK"
				pr.Reply = fmt.Sprint(v)
			} else if _, isReply := err.(ErrorReply); !isReply {
				conn.Close()
				conn = nil
			}
		}
		pr.Done = time.Now()
		if err != nil {
			pr.Reply = err.Error()
		}
		p.mu.Lock()
		p.log = append(p.log, pr)
		p.mu.Unlock()
	}
}

// Stop ends the probing (idempotent).
func (p *Prober) Stop() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
}

// Log is a copy of every attempt so far.
func (p *Prober) Log() []Probe {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Probe(nil), p.log...)
}

// Overlap is a moment two Redis provably accepted writes at once.
type Overlap struct {
	Writer   string    // the node whose run of accepted probes was cut into
	RunFrom  time.Time // that run: accepting from RunFrom to RunTo at least
	RunTo    time.Time
	Other    Probe // a write the other node accepted in between
	Accepted int   // accepted probes in the run
}

func (o Overlap) String() string {
	return fmt.Sprintf("%s accepted writes throughout %s .. %s (%d probes), and %s accepted one sent at %s, answered at %s",
		o.Writer, o.RunFrom.Format("15:04:05.000000"), o.RunTo.Format("15:04:05.000000"), o.Accepted,
		o.Other.Node, o.Other.Sent.Format("15:04:05.000000"), o.Other.Done.Format("15:04:05.000000"))
}

// Overlaps finds every accepted write that happened while another Redis
// was provably accepting writes.
//
// What the probes prove, honestly: an accepted probe shows its Redis took a
// write at some instant of [Sent, Done], no more. A run of consecutive
// accepted probes on one Redis (no refused or failed attempt in between)
// is taken as accepting writes from the first probe's Done to the last
// one's Sent: that assumes a Redis does not stop and start accepting again
// between two probes (20 ms apart), which would take a demote and a
// promote of the same node in that time. Another Redis' accepted probe
// whose whole [Sent, Done] lies inside such a run is a certain overlap.
// Overlaps shorter than about two probe intervals, or only at the edges of
// a run, can go unseen; a longer one cannot.
func Overlaps(log []Probe) []Overlap {
	byNode := map[string][]Probe{}
	for _, p := range log {
		byNode[p.Node] = append(byNode[p.Node], p)
	}
	var out []Overlap
	for node, ps := range byNode {
		for i := 0; i < len(ps); {
			if !ps[i].Accepted {
				i++
				continue
			}
			j := i
			for j+1 < len(ps) && ps[j+1].Accepted {
				j++
			}
			from, to := ps[i].Done, ps[j].Sent
			if j > i && from.Before(to) {
				for _, q := range log {
					if q.Node != node && q.Accepted && !q.Sent.Before(from) && !q.Done.After(to) {
						out = append(out, Overlap{Writer: node, RunFrom: from, RunTo: to, Other: q, Accepted: j - i + 1})
					}
				}
			}
			i = j + 1
		}
	}
	return out
}

// Writers lists, in time order, which node's Redis accepted probes, one
// entry per run of consecutive accepted probes across all nodes.
func Writers(log []Probe) []string {
	var out []string
	var accepted []Probe
	for _, p := range log {
		if p.Accepted {
			accepted = append(accepted, p)
		}
	}
	// The log is in completion order per node, not globally: sort by Done.
	slices.SortStableFunc(accepted, func(a, b Probe) int { return a.Done.Compare(b.Done) })
	for _, p := range accepted {
		if len(out) == 0 || out[len(out)-1] != p.Node {
			out = append(out, p.Node)
		}
	}
	return out
}
