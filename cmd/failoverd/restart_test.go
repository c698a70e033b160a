package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
	"github.com/failoverd/failoverd/healthcheck"
)

// campaignAs runs el's candidacy until the test ends and reports each term
// won on the returned channel (the term is held until the test ends).
func campaignAs(t *testing.T, el cluster.Elector) <-chan cluster.Term {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wins := make(chan cluster.Term, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		el.Campaign(ctx, func(tctx context.Context, tm cluster.Term) {
			wins <- tm
			<-tctx.Done()
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return wins
}

func waitTerm(t *testing.T, wins <-chan cluster.Term, within time.Duration, who string) cluster.Term {
	t.Helper()
	select {
	case tm := <-wins:
		return tm
	case <-time.After(within):
		t.Fatalf("%s did not win within %v", who, within)
		return nil
	}
}

// openNode opens node a's state file at dir with its lock taken, as a
// starting daemon with election.end_own_term_on_restart does.
func openNode(t *testing.T, dir string) *homeFile {
	t.Helper()
	h, err := openLockedHome(homeConfig(dir, "c", "a"), "")
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// exitProcess drops h's lock, as the kernel does when its process exits.
func exitProcess(h *homeFile) { h.lockFile.Close() }

// startFirst runs a first process of node a at dir in boot boot: it wins
// (a is first in the queue), records its entry, and keeps it; b then
// queues behind it. The entry outlives the process, as a dead daemon's
// session or lease does.
func startFirst(t *testing.T, w *controllertest.World, dir, boot string) (h *homeFile, ta cluster.Term, wb <-chan cluster.Term) {
	t.Helper()
	h = openNode(t, dir)
	r1, _, err := newRestarter(h, w.Node("a"), "first", boot, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	wa := campaignAs(t, withRestarter(w.Node("a"), r1))
	ta = waitTerm(t, wa, 5*time.Second, "a")
	want, _ := cluster.EntryOf(ta)
	if got, ok := h.Entry(); !ok || got != want {
		t.Fatalf("the state file records %v (%v); want %v", got, ok, want)
	}
	wb = campaignAs(t, w.Node("b"))
	for len(w.Queue()) < 2 {
		time.Sleep(time.Millisecond)
	}
	return h, ta, wb
}

// notWon fails if b wins within d.
func notWon(t *testing.T, w *controllertest.World, wb <-chan cluster.Term, d time.Duration, why string) {
	t.Helper()
	select {
	case <-wb:
		t.Fatalf("b won %s", why)
	case <-time.After(d):
	}
	if w.Leader() != "a" {
		t.Fatalf("leader %q; want a still (%s)", w.Leader(), why)
	}
}

// A term won is recorded in the node state file before the controller
// sees it; a later process of the node removes that entry at its first
// candidacy, so the standby wins at once, but only once the earlier
// process's lock is gone: while it is held (another live process of the
// node) the second process cannot even open the state file, and nothing
// is removed.
func TestRestartRemovesOwnPreviousEntry(t *testing.T) {
	w := controllertest.New()
	dir := t.TempDir()
	logger := slog.New(slog.DiscardHandler)
	h1, ta, wb := startFirst(t, w, dir, "boot-1")

	// The first process still holds the lock: a second one is refused
	// before it reads the file, and a restarter without the lock removes
	// nothing.
	if h, err := openLockedHome(homeConfig(dir, "c", "a"), ""); err == nil {
		t.Fatalf("a second process of a opened the locked state file %s", h.path)
	}
	if r, prev, err := newRestarter(&homeFile{path: h1.path}, w.Node("a-live"), "second", "boot-1", logger); err == nil {
		t.Fatalf("a restarter without the lock: %v, previous %q; want an error", r, prev)
	}
	notWon(t, w, wb, 300*time.Millisecond, "while the first process of a was alive (its lock held)")

	// The first process exits (its lock goes): the next one removes its entry.
	exitProcess(h1)
	start := time.Now()
	h3 := openNode(t, dir)
	r3, prev, err := newRestarter(h3, w.Node("a-restarted"), "third", "boot-1", logger)
	if err != nil {
		t.Fatal(err)
	}
	campaignAs(t, withRestarter(w.Node("a-restarted"), r3))
	if prev != "first" {
		t.Errorf("the restarted process names %q as its previous one; want first", prev)
	}
	var tb cluster.Term
	select {
	case tb = <-wb:
	case <-time.After(2 * time.Second):
		t.Fatalf("b did not win within 2s of the restart; queue %v", w.Queue())
	}
	if tb.Epoch() <= ta.Epoch() {
		t.Errorf("b won at %d, not above %d", tb.Epoch(), ta.Epoch())
	}
	t.Logf("b won %v after the restart", time.Since(start))
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := h3.Entry(); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the removed entry is still recorded")
		}
	}
}

// The lock proves an earlier process gone only within one boot of one
// kernel. A copy of the state directory started on another host (a VM
// clone, a restored backup) while the original runs takes its own lock
// and reads the original's live instance and entry: it must trust
// neither, so it removes nothing and names no previous instance (whose
// member record it would otherwise replace). After a reboot the same
// holds, at no cost: the old session or lease is long gone by then.
func TestRestartTrustsOnlyItsOwnBoot(t *testing.T) {
	w := controllertest.New()
	dir := t.TempDir()
	logger := slog.New(slog.DiscardHandler)
	h1, _, wb := startFirst(t, w, dir, "boot-original")

	// The copy: the same file in another directory, another kernel.
	copyDir := t.TempDir()
	b, err := os.ReadFile(h1.path)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := homePath(homeConfig(copyDir, "c", "a"))
	if err := os.MkdirAll(filepath.Dir(copyPath), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeFileSync(copyPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	hc := openNode(t, copyDir)
	rc, prev, err := newRestarter(hc, w.Node("a-copy"), "copy", "boot-clone", logger)
	if err != nil {
		t.Fatal(err)
	}
	if prev != "" {
		t.Errorf("the copy names %q as its previous instance; want none (the original may be alive)", prev)
	}
	campaignAs(t, withRestarter(w.Node("a-copy"), rc))
	for len(w.Queue()) < 3 {
		time.Sleep(time.Millisecond)
	}
	notWon(t, w, wb, 300*time.Millisecond, "after a copy of a's state directory started in another boot")
	if e, ok := hc.Entry(); ok {
		t.Errorf("the copy keeps the original's entry %v recorded", e)
	}
	st, _, err := readHome(copyPath)
	if err != nil || st.BootID != "boot-clone" || st.Instance != "copy" {
		t.Errorf("the copy's state file: %+v, %v; want its own instance and boot", st, err)
	}

	// Unreadable boot id: nothing trusted either.
	exitProcess(hc)
	hn := openNode(t, copyDir)
	if _, prev, err := newRestarter(hn, w.Node("a-noboot"), "noboot", "", logger); err != nil || prev != "" {
		t.Errorf("without a boot id: previous %q, %v; want none", prev, err)
	}
}

// The kernel's boot id is read, and is the same on every read.
func TestRestartBootID(t *testing.T) {
	if _, err := os.Stat(bootIDPath); err != nil {
		t.Skipf("no %s: %v", bootIDPath, err)
	}
	a, b := bootID(), bootID()
	if a == "" || a != b {
		t.Fatalf("boot id %q, then %q", a, b)
	}
	old := bootIDPath
	bootIDPath = filepath.Join(t.TempDir(), "none")
	defer func() { bootIDPath = old }()
	if id := bootID(); id != "" {
		t.Fatalf("an unreadable boot id read as %q", id)
	}
}

// A daemon with election.end_own_term_on_restart refuses to start while
// another process of its node holds the state file's lock (exit 2 from
// build), naming the lock file and that process; the lock is taken before
// the file is read, so even an unreadable file is not read then.
func TestRestartRefusedWhileLocked(t *testing.T) {
	dir := t.TempDir()
	cfg := homeConfig(dir, "c", "a")
	h := openNode(t, dir)
	if err := os.WriteFile(h.path, []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := openLockedHome(cfg, "")
	if err == nil {
		t.Fatal("opened while another process holds the lock")
	}
	for _, want := range []string{h.lockPath(), fmt.Sprintf("process %d", os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "unreadable") {
		t.Errorf("the state file was read before the lock was taken: %v", err)
	}
	// The daemon's build refuses the same way (cmdRun exits 2 on it).
	cfg.Election.EndOwnTermOnRestart = true
	cfg.Fencing.AllowNone = true
	if _, err := buildOn(cfg, slog.New(slog.DiscardHandler), controllerConfig(cfg), &backend{}, nil, loadedConfig{}); err == nil ||
		!strings.Contains(err.Error(), h.lockPath()) {
		t.Errorf("build while the lock is held: %v; want the lock refusal", err)
	}
}

// The previous process's entry is removed only after the startup demote
// of the restarted process succeeded: while that demote runs, the entry
// stays and the standby does not win; once it is over, the standby wins.
func TestRestartRemovesOnlyAfterTheStartupDemote(t *testing.T) {
	w := controllertest.New()
	dir := t.TempDir()
	h1, _, wb := startFirst(t, w, dir, "boot-1")
	exitProcess(h1)

	h := openNode(t, dir)
	node := w.Node("a-restarted")
	r, prev, err := newRestarter(h, node, "second", "boot-1", slog.New(slog.DiscardHandler))
	if err != nil || prev != "first" {
		t.Fatalf("restarter: previous %q, %v", prev, err)
	}
	hooks := controllertest.NewHooks()
	const demoteTakes = 1500 * time.Millisecond
	hooks.On("demote", controllertest.Result{Take: demoteTakes})
	c, err := controller.New(controller.Config{
		Cluster: "ct", NodeID: "a", Host: "host-a", AdminURL: "http://a:9101", ElectionMode: "fair",
		Demote:     controller.Hook{Timeout: time.Minute},
		BackoffMin: time.Second, BackoffMax: 8 * time.Second,
	}, controller.Deps{Elector: withRestarter(node, r), Records: node, Hooks: hooks, Fencer: &controllertest.Fencer{},
		Metrics: &controllertest.Metrics{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	start := time.Now()
	c.HealthChanged(healthcheck.Initializing, healthcheck.Healthy, nil)
	for len(hooks.Calls()) == 0 {
		if time.Since(start) > 5*time.Second {
			t.Fatal("no startup demote")
		}
		time.Sleep(time.Millisecond)
	}
	notWon(t, w, wb, demoteTakes/2, "while the restarted process's startup demote ran")
	if _, ok := h.Entry(); !ok {
		t.Error("the entry is no longer recorded while the startup demote runs")
	}
	select {
	case <-wb:
		t.Logf("b won %v after the restart (startup demote %v)", time.Since(start), demoteTakes)
	case <-time.After(demoteTakes + 3*time.Second):
		t.Fatalf("b did not win after the startup demote; queue %v, hooks %v", w.Queue(), hooks.Reasons())
	}
}
