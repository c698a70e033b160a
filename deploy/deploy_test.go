// Package deploy holds what operators load into their monitoring: the
// Prometheus alert rules (prometheus/alerts.yml, unit-tested by
// prometheus/alerts_test.yml) and the Grafana dashboard
// (grafana/failoverd.json). Its tests check them with promtool and against
// the metrics a running failoverd exports.
package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/failoverd/failoverd/test/clustertest"
)

const (
	alertsFile     = "prometheus/alerts.yml"
	alertTestsFile = "prometheus/alerts_test.yml"
	dashboardFile  = "grafana/failoverd.json"
)

// requirePromtool returns promtool's path. Without it the test fails under
// CI=true and is skipped elsewhere.
func requirePromtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	msg := "promtool not found (Debian package prometheus); run 'make deps'"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(requirePromtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestAlertRules runs promtool check rules and the rules' unit tests.
func TestAlertRules(t *testing.T) {
	out := promtool(t, "prometheus", "check", "rules", filepath.Base(alertsFile))
	t.Logf("%s", out)
	out = promtool(t, "prometheus", "test", "rules", filepath.Base(alertTestsFile))
	t.Logf("%s", out)
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules did not report SUCCESS:\n%s", out)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert  string            `yaml:"alert"`
			Record string            `yaml:"record"`
			Expr   string            `yaml:"expr"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTests struct {
	Tests []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// alertExprs maps each alert of alerts.yml to its expression.
func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	var rf ruleFile
	readYAML(t, alertsFile, &rf)
	alerts := map[string]string{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if _, dup := alerts[r.Alert]; dup {
				t.Errorf("alert %s is defined twice", r.Alert)
			}
			alerts[r.Alert] = r.Expr
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatalf("%s defines no alert", alertsFile)
	}
	return alerts
}

// TestEveryAlertFiresAndStaysQuietInTests requires, for every alert, a unit
// test in which it fires and one in which it is expected not to.
func TestEveryAlertFiresAndStaysQuietInTests(t *testing.T) {
	alerts := alertExprs(t)
	var rt ruleTests
	readYAML(t, alertTestsFile, &rt)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range rt.Tests {
		for _, a := range tc.AlertRuleTest {
			if _, ok := alerts[a.Alertname]; !ok {
				t.Errorf("test %q checks alert %s, which alerts.yml does not define", tc.Name, a.Alertname)
			}
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for name := range alerts {
		if !fires[name] {
			t.Errorf("alert %s has no test case in which it fires", name)
		}
		if !quiet[name] {
			t.Errorf("alert %s has no test case in which it stays quiet", name)
		}
	}
}

type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels flattens rows' nested panels.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// dashboardExprs lists "panel title/refId" and the query, for every query.
func dashboardExprs(d dashboard) [][2]string {
	var out [][2]string
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			out = append(out, [2]string{p.Title + "/" + tg.RefID, tg.Expr})
		}
	}
	return out
}

// TestDashboardIsWellFormed checks what Grafana needs to import the
// dashboard on any Prometheus data source: unique panel ids and query
// refIds, every query on the ${datasource} variable, panels within the
// 24-column grid.
func TestDashboardIsWellFormed(t *testing.T) {
	d := readDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard needs a title and a uid, got %q, %q", d.Title, d.UID)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	for _, want := range []string{"datasource", "cluster"} {
		if !slices.Contains(vars, want) {
			t.Errorf("dashboard has no variable %q (has %v)", want, vars)
		}
	}
	ids := map[int]string{}
	queries := 0
	for _, p := range allPanels(d.Panels) {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title)
		}
		ids[p.ID] = p.Title
		if p.GridPos.W <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos x=%d w=%d outside the 24-column grid", p.Title, p.GridPos.X, p.GridPos.W)
		}
		if p.Type == "row" {
			continue
		}
		if !strings.Contains(string(p.Datasource), "${datasource}") {
			t.Errorf("panel %q: datasource %s, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			queries++
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: empty or repeated refId %q", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q/%s: empty query", p.Title, tg.RefID)
			}
			if strings.Contains(tg.Expr, "failoverd_") && !strings.Contains(tg.Expr, `cluster=~"$cluster"`) {
				t.Errorf("panel %q/%s: query does not filter on the cluster variable: %s", p.Title, tg.RefID, tg.Expr)
			}
		}
	}
	if queries == 0 {
		t.Fatal("dashboard has no query")
	}
}

// grafanaVars stands in for the dashboard variables Prometheus does not
// know, so that promtool can parse the queries.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "1m",
	"$__interval", "1m",
	"$__range", "1h",
	"$cluster", ".*",
)

// TestDashboardQueriesParse hands every dashboard query to promtool (as the
// expression of a recording rule), so a query Prometheus would reject
// fails here rather than as an empty panel.
func TestDashboardQueriesParse(t *testing.T) {
	requirePromtool(t)
	exprs := dashboardExprs(readDashboard(t))
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, e := range exprs {
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: grafanaVars.Replace(e[1])})
	}
	data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.yml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := promtool(t, dir, "check", "rules", "dashboard.yml")
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(exprs)); !strings.Contains(out, want) {
		t.Fatalf("promtool check rules: want %q in\n%s", want, out)
	}
}

// metricName matches the metric names a query can name: failoverd's own
// and those of the Go and process collectors the daemon also exports.
var metricName = regexp.MustCompile(`\b(?:failoverd|process|go)_[a-zA-Z0-9_:]*`)

// namesIn lists the metric names an expression uses, label values and
// strings aside.
func namesIn(expr string) []string {
	// Drop quoted strings: label values such as "success".
	expr = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`).ReplaceAllString(expr, `""`)
	return metricName.FindAllString(expr, -1)
}

// TestQueriedMetricsAreExported starts a real cluster (two failoverd
// processes on a real ZooKeeper, with a follow hook and a position
// command, so that the metrics those feed exist), scrapes every node's
// /metrics and requires each metric name the dashboard's queries and the
// alert expressions use to be among them. A name counts when /metrics has
// its HELP or TYPE line or a sample: a labelled counter is written only
// once it has a series, which metrics.New creates at zero for the label
// values it knows, so a name that shows only after some event fails here
// and needs that event in this test.
func TestQueriedMetricsAreExported(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper and two daemons")
	}
	posDir := t.TempDir()
	c := clustertest.Start(t, clustertest.Options{
		Nodes:  2,
		Follow: true,
		ServiceYAML: func(n *clustertest.Node) string {
			p := filepath.Join(posDir, n.ID)
			if err := os.WriteFile(p, []byte("42\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("  position:\n    command: [cat, %s]\n    interval: 200ms\n", p)
		},
	})
	// The position gauge appears once service.position ran, the follow
	// gauges once the standby followed: wait for both on every node
	// rather than racing them.
	exported := map[string]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range c.Nodes {
		for {
			names, err := scrape(n.AdminAddr)
			if err == nil && names["failoverd_position"] {
				for k := range names {
					exported[k] = true
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s: /metrics without failoverd_position after 60s (err %v)", n.ID, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	used := map[string][]string{} // metric name -> where
	for _, e := range dashboardExprs(readDashboard(t)) {
		for _, name := range namesIn(e[1]) {
			used[name] = append(used[name], "dashboard "+e[0])
		}
	}
	for alert, expr := range alertExprs(t) {
		for _, name := range namesIn(expr) {
			used[name] = append(used[name], "alert "+alert)
		}
	}
	if len(used) == 0 {
		t.Fatal("found no metric name in the dashboard or the alerts")
	}
	var names []string
	for name := range used {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !exported[name] {
			t.Errorf("%s is not exported by failoverd (used by %s)", name, strings.Join(used[name], ", "))
		}
	}
	t.Logf("checked %d metric names used by the dashboard and the alerts against the %d the daemons export", len(names), len(exported))
}

// scrape returns the metric names of a /metrics page: those of its HELP and
// TYPE lines and of its samples (a histogram's _bucket, _sum, _count).
func scrape(addr string) (map[string]bool, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET /metrics: %s: %s", resp.Status, b)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			names[strings.Fields(rest)[0]] = true
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			names[strings.Fields(rest)[0]] = true
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			return nil, fmt.Errorf("unparsable /metrics line %q", line)
		}
		names[line[:end]] = true
	}
	return names, sc.Err()
}
