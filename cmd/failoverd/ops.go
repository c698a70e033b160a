package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/election"
	"github.com/failoverd/failoverd/zk"
)

// clusterView is what status prints: the cluster as ZooKeeper sees it.
type clusterView struct {
	Cluster    string              `json:"cluster"`
	Members    []controller.Status `json:"members"`
	Breadcrumb *breadcrumb.Record  `json:"breadcrumb,omitempty"`
	// BreadcrumbError is set when the breadcrumb exists but is unreadable.
	BreadcrumbError string   `json:"breadcrumb_error,omitempty"`
	Queue           []string `json:"election_queue"`
}

// connect loads the config and opens a ZooKeeper session for a CLI command.
func connect(path string, stderr io.Writer) (*config.Config, *zk.Client, *zk.Session, int) {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, nil, nil, exitUsage
	}
	zc, err := zkConfig(cfg, nil)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, nil, nil, exitUsage
	}
	client, err := zk.NewClient(zc)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, nil, nil, exitUsage
	}
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	sess, err := client.Session(ctx)
	if err != nil {
		client.Close()
		fmt.Fprintf(stderr, "failoverd: cannot reach zookeeper %v: %v\n", cfg.ZooKeeper.Servers, err)
		return nil, nil, nil, exitRuntime
	}
	return cfg, client, sess, -1
}

func readView(ctx context.Context, cfg *config.Config, sess *zk.Session) (clusterView, error) {
	v := clusterView{Cluster: cfg.Cluster}
	dir := layoutOf(cfg).MembersDir()
	ids, err := sess.Children(ctx, dir)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return v, err
	}
	slices.Sort(ids)
	for _, id := range ids {
		b, _, err := sess.Get(ctx, zk.Join(dir, id))
		if err != nil {
			continue
		}
		var s controller.Status
		if json.Unmarshal(b, &s) != nil {
			s = controller.Status{NodeID: id, State: "unreadable"}
		}
		v.Members = append(v.Members, s)
	}
	rec, _, err := breadcrumb.Read(ctx, sess, layoutOf(cfg).Breadcrumb())
	switch {
	case err == nil:
		v.Breadcrumb = &rec
	case !errors.Is(err, breadcrumb.ErrAbsent):
		v.BreadcrumbError = err.Error()
	}
	v.Queue, err = election.Queue(ctx, sess, layoutOf(cfg).ElectionDir())
	return v, err
}

func cmdStatus(args []string, stdout, stderr io.Writer) int {
	f := newFlags("status", "status -c FILE [--json]", stderr)
	asJSON := f.fs.Bool("json", false, "print JSON")
	if code := f.parse(args); code >= 0 {
		return code
	}
	cfg, client, sess, code := connect(f.config, stderr)
	if code >= 0 {
		return code
	}
	defer client.Close()
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	v, err := readView(ctx, cfg, sess)
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
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tSTATE\tHEALTH\tEPOCH\tSINCE\tHOST")
	for _, m := range v.Members {
		since := "-"
		if !m.Since.IsZero() {
			since = m.Since.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.NodeID, m.Role, m.State, m.Health, m.Epoch, since, m.Host)
	}
	tw.Flush()
	switch {
	case v.Breadcrumb != nil:
		fmt.Fprintf(stdout, "Breadcrumb: %s (epoch %d, host %s, since %s)\n", v.Breadcrumb.NodeID, v.Breadcrumb.Epoch, v.Breadcrumb.Host, v.Breadcrumb.Since.Local().Format(time.DateTime))
	case v.BreadcrumbError != "":
		fmt.Fprintf(stdout, "Breadcrumb: UNREADABLE: %s\n", v.BreadcrumbError)
	default:
		fmt.Fprintln(stdout, "Breadcrumb: none")
	}
	fmt.Fprintf(stdout, "Election queue: %v\n", v.Queue)
	return exitOK
}

func cmdBreadcrumb(args []string, stdout, stderr io.Writer) int {
	f := newFlags("breadcrumb", "breadcrumb -c FILE show|clear", stderr)
	if code := f.parse(args); code >= 0 {
		return code
	}
	action := f.fs.Arg(0)
	if action != "show" && action != "clear" {
		fmt.Fprintln(stderr, "failoverd breadcrumb: want 'show' or 'clear'")
		return exitUsage
	}
	cfg, client, sess, code := connect(f.config, stderr)
	if code >= 0 {
		return code
	}
	defer client.Close()
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	path := layoutOf(cfg).Breadcrumb()
	if action == "clear" {
		if err := breadcrumb.Clear(ctx, sess, path); err != nil {
			fmt.Fprintln(stderr, err)
			return exitRuntime
		}
		fmt.Fprintf(stdout, "breadcrumb %s cleared\n", path)
		return exitOK
	}
	data, _, err := sess.Get(ctx, path)
	if errors.Is(err, zk.ErrNoNode) {
		fmt.Fprintln(stdout, "no breadcrumb")
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitRuntime
	}
	fmt.Fprintf(stdout, "%s\n", data)
	if _, err := breadcrumb.Decode(data); err != nil {
		fmt.Fprintln(stderr, err)
		return exitRuntime
	}
	return exitOK
}

func cmdFailover(args []string, stdout, stderr io.Writer) int {
	f := newFlags("failover", "failover -c FILE --to NODE [--timeout 30s]", stderr)
	to := f.fs.String("to", "", "node id that should become leader (required)")
	timeout := f.fs.Duration("timeout", 30*time.Second, "how long to wait for NODE to take over (the other nodes stay out of the election that long at most)")
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
	cfg, client, sess, code := connect(f.config, stderr)
	if code >= 0 {
		return code
	}
	defer client.Close()
	// Ctrl-C or SIGTERM withdraws the request before we exit.
	sigCtx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	ctx, cancel := context.WithTimeout(sigCtx, *timeout+10*time.Second)
	defer cancel()

	v, err := readView(ctx, cfg, sess)
	if err != nil {
		fmt.Fprintln(stderr, "failoverd: reading cluster state:", err)
		return exitRuntime
	}
	var target *controller.Status
	for i := range v.Members {
		if v.Members[i].NodeID == *to {
			target = &v.Members[i]
		}
	}
	switch {
	case target == nil:
		fmt.Fprintf(stderr, "failoverd failover: %q is not a member of cluster %s (members: %s)\n", *to, cfg.Cluster, memberIDs(v))
		return exitRuntime
	case target.State == controller.StateLeader:
		fmt.Fprintf(stdout, "%s is already the leader (epoch %d)\n", *to, target.Epoch)
		return exitOK
	case target.Health != "healthy":
		fmt.Fprintf(stderr, "failoverd failover: %s is not healthy (health %s, state %s); refusing\n", *to, target.Health, target.State)
		return exitRuntime
	}

	start := time.Now()
	var id [8]byte
	rand.Read(id[:])
	req := cluster.FailoverRequest{
		To: *to, Deadline: start.Add(*timeout), TimeoutMS: timeout.Milliseconds(),
		ID: hex.EncodeToString(id[:]), By: "failoverd failover",
	}
	path := layoutOf(cfg).Failover()
	if err := writeFailoverRequest(ctx, sess, path, req); err != nil {
		fmt.Fprintln(stderr, "failoverd: writing the failover request:", err)
		return exitRuntime
	}
	defer withdrawFailoverRequest(sess, path)
	fmt.Fprintf(stdout, "failover to %s requested (timeout %v)\n", *to, *timeout)

	for time.Now().Before(req.Deadline) {
		if sigCtx.Err() != nil {
			fmt.Fprintf(stderr, "failoverd failover: interrupted; request withdrawn, the other nodes rejoin the election now\n")
			return exitRuntime
		}
		v, err := readView(ctx, cfg, sess)
		if err == nil {
			for _, m := range v.Members {
				if m.NodeID == *to && m.State == controller.StateLeader {
					fmt.Fprintf(stdout, "%s is the leader (epoch %d) after %v\n", *to, m.Epoch, time.Since(start).Round(time.Millisecond))
					return exitOK
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Fprintf(stderr, "failoverd failover: %s did not take over within %v; the other nodes rejoin the election now, so the cluster still ends with a leader\n", *to, *timeout)
	return exitRuntime
}

// writeFailoverRequest replaces whatever request is there (an earlier
// one's requester gave up on it) with req, as an EPHEMERAL znode of our
// session: the request lives only while we wait for its outcome. If this
// process dies (kill -9, a crash, a lost connection), ZooKeeper deletes it
// when our session expires, and the nodes standing aside for it rejoin the
// election; a node that restarts never finds a request whose requester is
// gone, so no node stands aside longer than our wait plus one session
// timeout. (Requests of earlier CLIs are persistent: the nodes delete one
// that is not done by its timeout, see controller.watchFailover.)
func writeFailoverRequest(ctx context.Context, sess *zk.Session, path string, req cluster.FailoverRequest) error {
	data, _ := json.Marshal(req)
	for attempt := 0; ; attempt++ {
		if err := sess.Delete(ctx, path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		_, _, err := sess.Create(ctx, path, data, zk.Ephemeral)
		if errors.Is(err, zk.ErrNodeExists) && attempt < 3 {
			continue // another requester was faster: ours replaces it
		}
		return err
	}
}

// withdrawFailoverRequest deletes our request, and only ours: another
// requester may have replaced it meanwhile.
func withdrawFailoverRequest(sess *zk.Session, path string) {
	ctx, cancel := withTimeout(5 * time.Second)
	defer cancel()
	_, st, err := sess.Get(ctx, path)
	if err != nil || st.EphemeralOwner != sess.ID() {
		return
	}
	_ = sess.Delete(ctx, path, st.Version)
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
