package etcdtest_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/etcdtest"
)

// BenchmarkRejoinElection measures how often a follower that rejoins
// after being cut off from its peers forces the etcd cluster into a new
// election, on each server line: Debian's 3.4 as it starts by default
// (without raft's pre-vote), Debian's 3.4 with --pre-vote=true, and the
// release line (pre-vote on by default). Run it with `make etcd-probe`.
//
// Each trial cuts one follower off from both peers (Isolate) for 4 s, four
// election timeouts: without pre-vote it campaigns, alone, in ever higher
// terms. Then it heals the cut and watches every member's status for 6 s
// (longer while no leader is seen). A trial counts as forcing an election
// when the cluster's raft term after the heal is above the one before, or
// its leader changed: the rejoining member's higher term made the leader
// step down. The leaderless window is the longest run of samples (every
// 50 ms, all members answering) in which no member leads in the highest
// term. No lease is renewed in that window; failoverd's leader can lose
// its term to it (docs/configuration.md, "Start etcd 3.4 with
// --pre-vote=true"). With -v it logs every trial; a table of the lines
// ends the output.
func BenchmarkRejoinElection(b *testing.B) {
	type line struct {
		name    string
		srv     etcdtest.Server
		preVote bool
	}
	var lines []line
	for _, srv := range etcdtest.Servers(b) {
		lines = append(lines, line{srv.Name, srv, false})
		if srv.Name == "debian" {
			lines = append(lines, line{srv.Name + "-prevote", srv, true})
		}
	}
	var rows []string
	for _, l := range lines {
		b.Run(l.name, func(b *testing.B) {
			v, _ := l.srv.Version()
			c := etcdtest.Start(b, etcdtest.Options{Server: l.srv, PreVote: l.preVote})
			trials, elections, disturbed := 0, 0, 0
			var longest time.Duration
			campaigns, preVotes := 0, 0
			for b.Loop() {
				r := trialRejoin(b, c, trials)
				trials++
				campaigns += r.campaigns
				preVotes += r.preVotes
				switch {
				case r.disturbed:
					disturbed++
				case r.election:
					elections++
				}
				longest = max(longest, r.leaderless)
			}
			counted := trials - disturbed
			b.ReportMetric(float64(elections)/float64(max(counted, 1)), "elections/trial")
			b.ReportMetric(float64(longest.Milliseconds()), "max-leaderless-ms")
			row := fmt.Sprintf("%-15s %-7s %d of %d trials forced an election, longest leaderless window %v (cut member: %d elections, %d pre-votes)",
				l.name, v, elections, counted, longest.Round(10*time.Millisecond), campaigns, preVotes)
			if disturbed > 0 {
				row += fmt.Sprintf("; %d trials left out: the majority elected during the cut", disturbed)
			}
			b.Log(row)
			rows = append(rows, row)
		})
	}
	if len(rows) > 0 {
		fmt.Fprintf(os.Stdout, "\nfollower cut off for 4 s, then healed (3 members, election timeout 1 s):\n")
		for _, r := range rows {
			fmt.Fprintln(os.Stdout, "  "+r)
		}
	}
}

type rejoinResult struct {
	election   bool          // the term rose or the leader changed after the heal
	leaderless time.Duration // the longest window without a leader after the heal
	campaigns  int           // elections the cut member started while cut off
	preVotes   int           // pre-vote rounds it started while cut off
	disturbed  bool          // the majority elected during the cut (a loaded machine)
}

// raftView is one sample of every member's status.
type raftView struct {
	at     time.Time
	terms  []uint64 // 0: did not answer
	leader int      // the member leading in the highest term (-1: none)
	term   uint64   // the highest term
	all    bool     // every member asked answered
}

// view asks every member but skip (-1: none) for its status, at once.
func view(c *etcdtest.Cluster, skip int) raftView {
	v := raftView{at: time.Now(), terms: make([]uint64, len(c.Members)), leader: -1, all: true}
	leads := make([]bool, len(c.Members))
	var wg sync.WaitGroup
	for i, m := range c.Members {
		if i == skip {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			st, err := c.Client(i).Status(ctx, m.Endpoint())
			cancel()
			if err == nil {
				v.terms[i] = st.RaftTerm
				leads[i] = st.Leader != 0 && st.Leader == st.Header.MemberId
			}
		})
	}
	wg.Wait()
	for i, t := range v.terms {
		if i == skip {
			continue
		}
		if t == 0 {
			v.all = false
		}
		v.term = max(v.term, t)
	}
	for i, t := range v.terms {
		if leads[i] && t == v.term {
			v.leader = i
		}
	}
	return v
}

func trialRejoin(b *testing.B, c *etcdtest.Cluster, trial int) rejoinResult {
	const cut, watch, poll = 4 * time.Second, 6 * time.Second, 50 * time.Millisecond
	var r rejoinResult
	c.WaitServing(60 * time.Second)
	time.Sleep(time.Second) // the followers settle after the last trial
	leader := c.Leader()
	f := (leader + 1) % len(c.Members)
	before := view(c, -1)
	logFrom := logSize(c.Members[f].LogPath())
	c.Isolate(f)
	majority := before
	for end := time.Now().Add(cut); time.Now().Before(end); time.Sleep(poll) {
		v := view(c, f)
		if !v.all {
			continue
		}
		if v.leader != leader || v.term != before.term {
			r.disturbed = true
		}
		majority = v
	}
	r.campaigns, r.preVotes = campaignsSince(c.Members[f].LogPath(), logFrom)
	c.Heal(f)
	healed := time.Now()
	var since time.Time // start of the current leaderless run
	last := majority
	for {
		v := view(c, -1)
		if v.all {
			switch {
			case v.leader < 0 && since.IsZero():
				since = v.at
			case v.leader >= 0 && !since.IsZero():
				r.leaderless = max(r.leaderless, v.at.Sub(since))
				since = time.Time{}
			}
			if v.leader >= 0 {
				last = v
			}
		}
		if time.Since(healed) > watch && since.IsZero() {
			break
		}
		if time.Since(healed) > 30*time.Second {
			r.leaderless = max(r.leaderless, time.Since(since))
			b.Logf("trial %d: no leader 30 s after the heal", trial)
			break
		}
		time.Sleep(poll)
	}
	r.election = last.term > majority.term || last.leader != majority.leader
	if !testing.Verbose() && !r.disturbed {
		return r // a benchmark's log keeps its first lines only: the summary's
	}
	b.Logf("trial %d: cut %s (%d elections, %d pre-votes while cut off); leader %s term %d before the heal, %s term %d after; leaderless %v",
		trial, c.Members[f].Name, r.campaigns, r.preVotes, name(c, majority.leader), majority.term,
		name(c, last.leader), last.term, r.leaderless.Round(10*time.Millisecond))
	return r
}

func name(c *etcdtest.Cluster, i int) string {
	if i < 0 {
		return "none"
	}
	return c.Members[i].Name
}

func logSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

var campaignRE = regexp.MustCompile(`became (pre-)?candidate at term`)

// campaignsSince counts the elections and pre-vote rounds a member's log
// records from offset on (its raft term is not in its status: etcd reports
// the term of the last entry it applied, which stays while it is cut off).
func campaignsSince(path string, offset int64) (elections, preVotes int) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return 0, 0
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m := campaignRE.FindSubmatch(sc.Bytes()); m != nil {
			if len(m[1]) > 0 {
				preVotes++
			} else {
				elections++
			}
		}
	}
	return elections, preVotes
}
