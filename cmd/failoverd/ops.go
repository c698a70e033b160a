package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/config"
)

// clusterView is what status prints: the cluster as its coordination
// service sees it.
type clusterView struct {
	Cluster    string             `json:"cluster"`
	Members    []cluster.Member   `json:"members"`
	Breadcrumb *breadcrumb.Record `json:"breadcrumb,omitempty"`
	// BreadcrumbError is set when the breadcrumb exists but is unreadable.
	BreadcrumbError string   `json:"breadcrumb_error,omitempty"`
	Queue           []string `json:"election_queue"`
	// LeaderPosition is the last position a leader published (nil: none),
	// LeaderPositionError why it cannot be read.
	LeaderPosition      *cluster.LeaderPosition `json:"leader_position,omitempty"`
	LeaderPositionError string                  `json:"leader_position_error,omitempty"`
	// Pause is the cluster's maintenance-mode record (nil: not paused).
	Pause *cluster.Pause `json:"pause,omitempty"`
	// Down lists the members that went away: known (they joined once)
	// but with no member record now, with when they were last seen,
	// until `failoverd forget` removes them. DownError says why the
	// known members cannot be read.
	Down      []cluster.KnownMember `json:"down"`
	DownError string                `json:"down_error,omitempty"`
	// NotLeading says, for every member that does not lead, why (its
	// record's not_leading, or held_out when the leader holds it after a
	// failed handover); NoLeader why no member leads ("": one does).
	NotLeading map[string]string `json:"not_leading,omitempty"`
	NoLeader   string            `json:"no_leader,omitempty"`
	// Moved is set when the cluster was moved away from the place this
	// configuration names (failoverd migrate): the rest is history.
	Moved *movedView `json:"moved,omitempty"`
}

// movedView is where a cluster moved to.
type movedView struct {
	Record string     `json:"record"`
	Place  string     `json:"place,omitempty"`
	At     *time.Time `json:"at,omitempty"`
}

func (m *movedView) String() string {
	s := "record " + m.Record
	if m.Place != "" {
		s = fmt.Sprintf("%s (record %s)", m.Place, m.Record)
	}
	if m.At != nil {
		s += " at " + m.At.UTC().Format(time.RFC3339)
	}
	return s
}

// movedOf reads whether the cluster moved away (nil: it did not, or the
// record cannot be read: the commands then show what they always do).
func movedOf(ctx context.Context, store operatorStore) *movedView {
	rec, _, err := store.ClusterRecord(ctx)
	if err != nil || rec == nil || rec.MovedTo == "" {
		return nil
	}
	return &movedView{Record: rec.MovedTo, Place: rec.MovedToPlace, At: rec.MovedAt}
}

// connect loads the config and opens a session with its coordination
// service for a CLI command; the commands read and write the cluster's
// records through the store. closeStore ends the session.
func connect(path string, stderr io.Writer) (cfg *config.Config, store operatorStore, closeStore func(), code int) {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, nil, nil, exitUsage
	}
	be, err := openBackend(cfg, "", "", nil)
	if err != nil {
		var ue *unreachableError
		if errors.As(err, &ue) {
			fmt.Fprintln(stderr, "failoverd:", err)
			return nil, nil, nil, exitRuntime
		}
		fmt.Fprintln(stderr, err)
		return nil, nil, nil, exitUsage
	}
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	if err := be.session(ctx); err != nil || ctx.Err() != nil {
		be.close()
		if err == nil {
			err = ctx.Err()
		}
		fmt.Fprintf(stderr, "failoverd: cannot reach %s: %v\n", be.desc, err)
		return nil, nil, nil, exitRuntime
	}
	return cfg, be.store, be.close, -1
}

func readView(ctx context.Context, cfg *config.Config, store operatorStore) (clusterView, error) {
	v := clusterView{Cluster: cfg.Cluster, Moved: movedOf(ctx, store)}
	var err error
	if v.Members, err = store.Members(ctx); err != nil {
		return v, err
	}
	rec, _, err := store.ReadBreadcrumb(ctx)
	switch {
	case err == nil:
		v.Breadcrumb = &rec
	case !errors.Is(err, breadcrumb.ErrAbsent):
		v.BreadcrumbError = err.Error()
	}
	if v.LeaderPosition, err = store.ReadLeaderPosition(ctx); err != nil {
		v.LeaderPositionError = err.Error()
	}
	if v.Pause, err = store.ReadPause(ctx); err != nil {
		return v, err
	}
	v.NotLeading, v.NoLeader = notLeadingOf(v.Members), noLeaderWhy(v.Members, v.Pause)
	v.Down = []cluster.KnownMember{}
	if known, err := store.KnownMembers(ctx); err != nil {
		v.DownError = err.Error()
	} else {
		v.Down = downMembers(known, v.Members)
	}
	v.Queue, err = store.Queue(ctx)
	return v, err
}

func cmdStatus(args []string, stdout, stderr io.Writer) int {
	f := newFlags("status", "status -c FILE [--json]", stderr)
	asJSON := f.fs.Bool("json", false, "print JSON")
	if code := f.parse(args); code >= 0 {
		return code
	}
	cfg, store, closeStore, code := connect(f.config, stderr)
	if code >= 0 {
		return code
	}
	defer closeStore()
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	v, err := readView(ctx, cfg, store)
	if err != nil {
		fmt.Fprintln(stderr, "failoverd: reading cluster state:", err)
		return exitRuntime
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(v)
		return exitOK
	}
	fmt.Fprintf(stdout, "Cluster: %s\n", v.Cluster)
	if v.Moved != nil {
		fmt.Fprintf(stdout, "Moved: this cluster moved to %s (failoverd migrate); this configuration names the old place, shown below as it was left\n", v.Moved)
	}
	printPause(stdout, v)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tSTATE\tHEALTH\tEPOCH\tSINCE\tHOST\tADDRESS\tFOLLOWING\tFOLLOWING SINCE\tPRIORITY\tPOSITION\tLAG\tCONFIG\tCONFIG LOADED")
	for _, m := range v.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.NodeID, m.Role, stateCell(m), m.Health, m.Epoch, timeOrDash(m.Since), m.Host,
			orDash(m.ServiceAddress), following(m), timeOrDash(m.FollowingSince), priority(m), position(m), lag(m, v.LeaderPosition),
			orDash(m.ConfigHash), timeOrDash(m.ConfigLoadedAt))
	}
	for _, k := range v.Down {
		fmt.Fprintf(tw, "%s\t-\tDOWN\t-\t-\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\n", k.NodeID, "last seen "+timeOrDash(k.LastSeen), orDash(k.Host))
	}
	tw.Flush()
	printNotLeading(stdout, v)
	for _, m := range v.Members {
		if m.NotFollowing != "" {
			fmt.Fprintf(stdout, "Not following: %s: %s\n", m.NodeID, m.NotFollowing)
		}
	}
	if len(v.Down) > 0 {
		fmt.Fprintf(stdout, "Down: %s (gone since their last seen time at most %s after it; 'failoverd forget NODE' stops listing one)\n",
			downIDs(v.Down), cluster.RememberEvery)
	}
	if v.DownError != "" {
		fmt.Fprintf(stdout, "Down: UNREADABLE: %s\n", v.DownError)
	}
	if v.NoLeader != "" {
		fmt.Fprint(stdout, wrap("Leader: none: "+v.NoLeader, whyWidth, "    "))
	}
	switch {
	case v.Breadcrumb != nil:
		addr := ""
		if a := v.Breadcrumb.ServiceAddress; a != "" {
			addr = ", address " + a
		}
		fmt.Fprintf(stdout, "Breadcrumb: %s (epoch %d, host %s%s, since %s)\n", v.Breadcrumb.NodeID, v.Breadcrumb.Epoch, v.Breadcrumb.Host, addr, v.Breadcrumb.Since.Local().Format(time.DateTime))
	case v.BreadcrumbError != "":
		fmt.Fprintf(stdout, "Breadcrumb: UNREADABLE: %s\n", v.BreadcrumbError)
	default:
		fmt.Fprintln(stdout, "Breadcrumb: none")
	}
	switch lp := v.LeaderPosition; {
	case lp != nil:
		fmt.Fprintf(stdout, "Leader position: %d (%s, epoch %d, at %s)\n", lp.Position, lp.NodeID, lp.Epoch, timeOrDash(lp.At))
	case v.LeaderPositionError != "":
		fmt.Fprintf(stdout, "Leader position: UNREADABLE: %s\n", v.LeaderPositionError)
	}
	fmt.Fprintf(stdout, "Election queue: %v\n", v.Queue)
	return exitOK
}

// downMembers are the known members without a member record.
func downMembers(known []cluster.KnownMember, live []cluster.Member) []cluster.KnownMember {
	out := []cluster.KnownMember{}
	for _, k := range known {
		if !slices.ContainsFunc(live, func(m cluster.Member) bool { return m.NodeID == k.NodeID }) {
			out = append(out, k)
		}
	}
	return out
}

func downIDs(ks []cluster.KnownMember) string {
	ids := make([]string, 0, len(ks))
	for _, k := range ks {
		ids = append(ids, k.NodeID)
	}
	return strings.Join(ids, ", ")
}

// cmdForget stops listing a member that went away: it deletes its
// known-member record, refusing while the node's member record exists
// (its daemon runs; it would write the record again anyway).
func cmdForget(args []string, stdout, stderr io.Writer) int {
	f := newFlags("forget", "forget -c FILE NODE", stderr)
	if code := f.parse(args); code >= 0 {
		return code
	}
	id := f.fs.Arg(0)
	if id == "" || f.fs.NArg() != 1 {
		fmt.Fprintln(stderr, "failoverd forget: want exactly one NODE")
		return exitUsage
	}
	cfg, store, closeStore, code := connect(f.config, stderr)
	if code >= 0 {
		return code
	}
	defer closeStore()
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	forgot, err := store.ForgetMember(ctx, id)
	switch {
	case errors.Is(err, cluster.ErrMemberLive):
		fmt.Fprintf(stderr, "failoverd forget: %s is live (its member record exists): refusing; stop its daemon first\n", id)
		return exitRuntime
	case err != nil:
		fmt.Fprintln(stderr, "failoverd forget:", err)
		return exitRuntime
	case !forgot:
		fmt.Fprintf(stdout, "%s is not a known member of cluster %s: nothing to forget\n", id, cfg.Cluster)
		return exitOK
	}
	fmt.Fprintf(stdout, "%s forgotten: status no longer lists it (it is listed again if its daemon starts)\n", id)
	return exitOK
}

// position is the POSITION column ("-": unknown, or no service.position).
func position(m cluster.Member) string {
	if m.Position == nil {
		return "-"
	}
	return strconv.FormatInt(*m.Position, 10)
}

// lag is the LAG column: how far the member's position is behind the last
// position a leader published (0 when not behind; "-": either unknown).
// Both are up to one service.position.interval old.
func lag(m cluster.Member, lp *cluster.LeaderPosition) string {
	if m.Position == nil || lp == nil {
		return "-"
	}
	return strconv.FormatInt(max(0, lp.Position-*m.Position), 10)
}

// priority is the PRIORITY column ("-": a member of a version without
// priorities, which campaigns like priority 1).
func priority(m cluster.Member) string {
	if m.Priority == nil {
		return "-"
	}
	return strconv.Itoa(*m.Priority)
}

// following is the FOLLOWING column: the leader the member's follow hook
// last pointed its service at, as id@epoch ("-": none).
func following(m cluster.Member) string {
	if m.Following == "" {
		return "-"
	}
	return fmt.Sprintf("%s@%d", m.Following, m.FollowingEpoch)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timeOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

func cmdBreadcrumb(args []string, stdout, stderr io.Writer) int {
	f := newFlags("breadcrumb", "breadcrumb -c FILE show|clear [--force]", stderr)
	force := f.fs.Bool("force", false, "clear a readable breadcrumb whose node has no running daemon (its service is known to be down)")
	if code := f.parse(args); code >= 0 {
		return code
	}
	action := f.fs.Arg(0)
	if action != "show" && action != "clear" {
		fmt.Fprintln(stderr, "failoverd breadcrumb: want 'show' or 'clear'")
		return exitUsage
	}
	// Flags after the action ("clear --force", as the synopsis has it):
	// the flag package stops at the first argument that is not one.
	if rest := f.fs.Args()[1:]; len(rest) > 0 {
		if code := f.parse(rest); code >= 0 {
			return code
		}
		if f.fs.NArg() > 0 {
			fmt.Fprintf(stderr, "failoverd breadcrumb: unexpected argument %q\n", f.fs.Arg(0))
			return exitUsage
		}
	}
	cfg, store, closeStore, code := connect(f.config, stderr)
	if code >= 0 {
		return code
	}
	defer closeStore()
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	return breadcrumbAction(ctx, store, layoutOf(cfg).Breadcrumb(), action, *force, stdout, stderr)
}

// breadcrumbAction shows or clears the breadcrumb at path in store.
func breadcrumbAction(ctx context.Context, store operatorStore, path, action string, force bool, stdout, stderr io.Writer) int {
	// The raw data, so that an operator sees what an unreadable one holds.
	data, rev, err := store.ReadBreadcrumbData(ctx)
	if errors.Is(err, breadcrumb.ErrAbsent) {
		fmt.Fprintln(stdout, "no breadcrumb")
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitRuntime
	}
	if action == "clear" {
		return clearBreadcrumb(ctx, store, path, data, rev, force, stdout, stderr)
	}
	fmt.Fprintf(stdout, "%s\n", data)
	if _, err := breadcrumb.Decode(data); err != nil {
		fmt.Fprintln(stderr, err)
		return exitRuntime
	}
	return exitOK
}

func cmdFailover(args []string, stdout, stderr io.Writer) int {
	f := newFlags("failover", "failover -c FILE --to NODE [--timeout 30s] [--force]", stderr)
	to := f.fs.String("to", "", "node id that should become leader (required)")
	timeout := f.fs.Duration("timeout", 30*time.Second, "how long to wait for NODE to take over (the other nodes stay out of the election that long at most); "+
		"unset, 30s plus how much service.demote.graceful_timeout exceeds service.demote.timeout (the leader's demote before it hands over)")
	force := f.fs.Bool("force", false, "fail over to NODE even when it lags more than election.max_lag")
	if code := f.parse(args); code >= 0 {
		return code
	}
	if *to == "" {
		fmt.Fprintln(stderr, "failoverd failover: --to NODE is required")
		return exitUsage
	}
	if *timeout <= 0 || *timeout > cluster.MaxFailoverTimeout {
		fmt.Fprintf(stderr, "failoverd failover: --timeout must be > 0 and <= %s, got %s\n", cluster.MaxFailoverTimeout, *timeout)
		return exitUsage
	}
	cfg, store, closeStore, code := connect(f.config, stderr)
	if code >= 0 {
		return code
	}
	defer closeStore()
	timeoutSet := false
	f.fs.Visit(func(fl *flag.Flag) { timeoutSet = timeoutSet || fl.Name == "timeout" })
	if !timeoutSet {
		// The leader keeps its term until its graceful demote is over.
		*timeout = min(*timeout+cfg.Service.Demote.Graceful()-cfg.Service.Demote.Timeout.Std(), cluster.MaxFailoverTimeout)
	}
	// Ctrl-C or SIGTERM withdraws the request before we exit.
	sigCtx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	ctx, cancel := context.WithTimeout(sigCtx, *timeout+10*time.Second)
	defer cancel()

	v, err := readView(ctx, cfg, store)
	if err != nil {
		fmt.Fprintln(stderr, "failoverd: reading cluster state:", err)
		return exitRuntime
	}
	var target *cluster.Member
	for i := range v.Members {
		if v.Members[i].NodeID == *to {
			target = &v.Members[i]
		}
	}
	switch {
	case target == nil:
		fmt.Fprintf(stderr, "failoverd failover: %q is not a member of cluster %s (members: %s)\n", *to, cfg.Cluster, memberIDs(v))
		return exitRuntime
	case target.State == cluster.StateLeader:
		fmt.Fprintf(stdout, "%s is already the leader (epoch %d)\n", *to, target.Epoch)
		return exitOK
	case !target.MayLead():
		fmt.Fprintf(stderr, "failoverd failover: %s has node.priority 0 and never leads; refusing (choose a node with priority >= 1)\n", *to)
		return exitRuntime
	case target.Health != "healthy":
		fmt.Fprintf(stderr, "failoverd failover: %s is not healthy (health %s, state %s); refusing\n", *to, target.Health, target.State)
		return exitRuntime
	}
	if why := failoverLagRefusal(cfg.Election.MaxLag, *target, v); why != "" {
		if !*force {
			fmt.Fprintf(stderr, "failoverd failover: %s; refusing (--force promotes it anyway, losing what it lacks)\n", why)
			return exitRuntime
		}
		fmt.Fprintf(stderr, "failoverd failover: %s; going ahead (--force)\n", why)
	}

	start := time.Now()
	var id [8]byte
	rand.Read(id[:])
	req := cluster.FailoverRequest{
		To: *to, Deadline: start.Add(*timeout), TimeoutMS: timeout.Milliseconds(),
		ID: hex.EncodeToString(id[:]), By: "failoverd failover",
	}
	// The request is an ephemeral of our session (see
	// zkcluster.Store.RequestFailover): it lives only while we wait.
	if err := store.RequestFailover(ctx, req); err != nil {
		fmt.Fprintln(stderr, "failoverd:", err)
		return exitRuntime
	}
	defer func() {
		ctx, cancel := withTimeout(5 * time.Second)
		defer cancel()
		_ = store.WithdrawFailover(ctx, req.Key())
	}()
	fmt.Fprintf(stdout, "failover to %s requested (timeout %v)\n", *to, *timeout)

	// Watch the member records until the target publishes that it leads.
	wait, stopWaiting := context.WithTimeout(sigCtx, *timeout)
	defer stopWaiting()
	var epoch int64
	_ = store.WatchMembers(wait, func(ms []cluster.Member) {
		for _, m := range ms {
			if m.NodeID == *to && m.State == cluster.StateLeader {
				epoch = m.Epoch
				stopWaiting()
			}
		}
	})
	switch {
	case epoch != 0:
		fmt.Fprintf(stdout, "%s is the leader (epoch %d) after %v\n", *to, epoch, time.Since(start).Round(time.Millisecond))
		return exitOK
	case sigCtx.Err() != nil:
		fmt.Fprintf(stderr, "failoverd failover: interrupted; request withdrawn, the other nodes rejoin the election now\n")
		return exitRuntime
	}
	if v.Pause != nil {
		// Paused: the old leader handed over and nobody else campaigns,
		// so no node takes over until the operator acts.
		fmt.Fprintf(stderr, "failoverd failover: %s did not take over within %v; the cluster is paused, so no other node takes over: there may be no leader until you resume or fail over to another node\n", *to, *timeout)
		return exitRuntime
	}
	fmt.Fprintf(stderr, "failoverd failover: %s did not take over within %v; the other nodes rejoin the election now, so the cluster still ends with a leader\n", *to, *timeout)
	return exitRuntime
}

func memberIDs(v clusterView) string {
	var ids []string
	for _, m := range v.Members {
		ids = append(ids, m.NodeID)
	}
	if len(ids) == 0 {
		return "none"
	}
	return fmt.Sprint(ids)
}

// clearBreadcrumb deletes the breadcrumb, which tells the next leader whom
// to fence: without it a successor promotes without fencing anyone. So it
// refuses while the node the breadcrumb names has a running daemon (its
// member record exists: it demotes or hands over itself), and clears a
// readable one only with force (its service is known to be down). An
// unreadable one, which no leader can act on, it clears as it is. data
// is the breadcrumb as read, rev its revision: the delete is at rev, so a
// breadcrumb a new leader wrote after the read (it names whom that leader
// needs fenced) is never deleted on the strength of the checks made on
// the old one; clear then refuses and says what the breadcrumb holds now.
func clearBreadcrumb(ctx context.Context, store operatorStore, path string, data []byte, rev cluster.Revision, force bool, stdout, stderr io.Writer) int {
	rec, decodeErr := breadcrumb.Decode(data)
	if decodeErr == nil {
		members, err := store.Members(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "failoverd breadcrumb clear: cannot read the members to check that %s is down: %v\n", rec.NodeID, err)
			return exitRuntime
		}
		for _, m := range members {
			if m.NodeID == rec.NodeID {
				fmt.Fprintf(stderr, "failoverd breadcrumb clear: refused: the breadcrumb names %s (epoch %d), whose failoverd is running (state %s); "+
					"without it the next leader would promote without fencing %s. Stop or fail over that node instead (failoverd failover --to NODE)\n",
					rec.NodeID, rec.Epoch, m.State, rec.NodeID)
				return exitRuntime
			}
		}
		if !force {
			fmt.Fprintf(stderr, "failoverd breadcrumb clear: the breadcrumb names %s (epoch %d, host %s); without it the next leader promotes without fencing %s. "+
				"Clear it only when %s's service is known to be down (its host is off), with --force\n",
				rec.NodeID, rec.Epoch, rec.Host, rec.NodeID, rec.NodeID)
			return exitRuntime
		}
	}
	err := store.ClearBreadcrumb(ctx, rev)
	switch {
	case errors.Is(err, breadcrumb.ErrAbsent):
		fmt.Fprintf(stdout, "breadcrumb %s is already gone: it was deleted since it was read; nothing to clear\n", path)
		return exitOK
	case errors.Is(err, breadcrumb.ErrChanged):
		fmt.Fprintf(stderr, "failoverd breadcrumb clear: refused: breadcrumb %s changed since it was read (it held %s); %s. "+
			"Nothing was deleted: check it (failoverd breadcrumb show, failoverd status) and run clear again if it must still go\n",
			path, describeBreadcrumb(data), nowHolds(ctx, store))
		return exitRuntime
	case err != nil:
		fmt.Fprintln(stderr, err)
		return exitRuntime
	}
	if decodeErr == nil {
		fmt.Fprintf(stdout, "breadcrumb %s of %s (epoch %d) cleared: the next leader will not fence %s\n", path, rec.NodeID, rec.Epoch, rec.NodeID)
	} else {
		fmt.Fprintf(stdout, "unreadable breadcrumb %s cleared\n", path)
	}
	return exitOK
}

// describeBreadcrumb names the node and epoch breadcrumb data holds, for
// messages.
func describeBreadcrumb(data []byte) string {
	rec, err := breadcrumb.Decode(data)
	if err != nil {
		return "an unreadable record"
	}
	return fmt.Sprintf("%s, epoch %d", rec.NodeID, rec.Epoch)
}

// nowHolds says what the breadcrumb holds when read again.
func nowHolds(ctx context.Context, store operatorStore) string {
	data, _, err := store.ReadBreadcrumbData(ctx)
	switch {
	case errors.Is(err, breadcrumb.ErrAbsent):
		return "it is gone now"
	case err != nil:
		return fmt.Sprintf("reading it again failed: %v", err)
	}
	return "it now holds " + describeBreadcrumb(data) + ", written by a leader since"
}
