package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/config"
)

// cmdReload asks the daemon running with this config file to reload it
// (POST /v1/reload with the admin token) and prints what it did. The file
// may be invalid: only its admin API address, TLS and token file are
// read here, and the daemon validates the rest. Exit 0 when the daemon
// applied the file; 1 when it refused it or found it invalid (nothing
// applied), refused the token, or could not be reached or answered
// unreadably; 2 when the CLI could not use the file itself (unreadable
// or not YAML, no admin API address or token file, an unreadable token
// or CA file) and asked nothing.
func cmdReload(args []string, stdout, stderr io.Writer) int {
	f := newFlags("reload", "reload -c FILE [--json] [--url URL] [--ca-file FILE] [--token-file FILE] [--timeout 30s]", stderr)
	asJSON := f.fs.Bool("json", false, "print the daemon's answer as JSON")
	rawURL := f.fs.String("url", "", "the daemon's admin API base URL (default: the one peers use, from the file)")
	caFile := f.fs.String("ca-file", "", "PEM CA bundle that verifies an https admin API (default: the first rpc fencing method's ca_file, else the system roots)")
	tokenFile := f.fs.String("token-file", "", "the admin token the daemon runs with (default: node.admin.token_file; give the old one when the reload changes the token)")
	timeout := f.fs.Duration("timeout", 30*time.Second, "how long to wait for the answer")
	if code := f.parse(args); code >= 0 {
		return code
	}
	cfg, err := config.LoadLenient(f.config)
	if err != nil {
		fmt.Fprintln(stderr, "failoverd reload:", err)
		return exitUsage
	}
	base := *rawURL
	if base == "" {
		base = cfg.AdminURL()
	}
	if base == "" {
		fmt.Fprintln(stderr, "failoverd reload: no admin API address in the file (node.admin.listen); use --url, or send SIGHUP to the daemon")
		return exitUsage
	}
	if *tokenFile != "" {
		cfg.Node.Admin.TokenFile = *tokenFile
	}
	if cfg.Node.Admin.TokenFile == "" {
		fmt.Fprintln(stderr, "failoverd reload: node.admin.token_file is not set, so the daemon's mutating endpoints are off; send it SIGHUP instead (systemctl reload failoverd)")
		return exitUsage
	}
	tok, err := cfg.ReadToken()
	if err != nil {
		fmt.Fprintln(stderr, "failoverd reload: node.admin.token_file:", err)
		return exitUsage
	}
	client, err := reloadClient(cfg, *caFile, *timeout)
	if err != nil {
		fmt.Fprintln(stderr, "failoverd reload:", err)
		return exitUsage
	}
	req, err := http.NewRequest(http.MethodPost, strings.TrimRight(base, "/")+adminapi.ReloadPath, bytes.NewReader(nil))
	if err != nil {
		fmt.Fprintln(stderr, "failoverd reload:", err)
		return exitUsage
	}
	req.Header.Set("Authorization", "Bearer "+tok.Reveal())
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "failoverd reload: cannot reach the daemon at %s: %v\n", base, err)
		return exitRuntime
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		fmt.Fprintf(stderr, "failoverd reload: the daemon refused the token in %s; if this reload changes node.admin.token_file, pass the token the daemon runs with: --token-file OLD\n", cfg.Node.Admin.TokenFile)
		return exitRuntime
	}
	var ans adminapi.ReloadAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ans); err != nil {
		fmt.Fprintf(stderr, "failoverd reload: %s answered %s, unreadable: %v\n", base, resp.Status, err)
		return exitRuntime
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(ans)
	} else {
		printReload(stdout, stderr, ans)
	}
	if !ans.Applied {
		return exitRuntime
	}
	return exitOK
}

// reloadClient is the HTTP client for the daemon's admin API.
func reloadClient(cfg *config.Config, caFile string, timeout time.Duration) (*http.Client, error) {
	if caFile == "" {
		for _, m := range cfg.Fencing.Methods {
			if m.RPC != nil && m.RPC.CAFile != "" {
				caFile = m.RPC.CAFile
				break
			}
		}
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
		}
		tc.RootCAs = pool
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{Proxy: nil, TLSClientConfig: tc}}, nil
}

// printReload prints the daemon's answer for people.
func printReload(stdout, stderr io.Writer, ans adminapi.ReloadAnswer) {
	running := ans.ConfigHash
	if ans.ConfigLoadedAt != nil {
		running += ", loaded " + ans.ConfigLoadedAt.Local().Format(time.DateTime)
	}
	switch {
	case ans.Applied && len(ans.Changed) == 0:
		fmt.Fprintf(stdout, "%s reloaded its config (%s): no key changed\n", ans.NodeID, running)
	case ans.Applied:
		fmt.Fprintf(stdout, "%s reloaded its config (%s); applied:\n", ans.NodeID, running)
		for _, k := range ans.Changed {
			fmt.Fprintf(stdout, "  %s\n", k)
		}
	case len(ans.Invalid) > 0:
		fmt.Fprintf(stderr, "%s: invalid config, nothing applied (still running %s):\n", ans.NodeID, running)
		for _, p := range ans.Invalid {
			fmt.Fprintf(stderr, "  %s\n", p)
		}
	case len(ans.Refused) > 0:
		fmt.Fprintf(stderr, "%s: reload refused, nothing applied (still running %s); these keys need a restart:\n", ans.NodeID, running)
		for _, p := range ans.Refused {
			fmt.Fprintf(stderr, "  %s\n", p)
		}
	default:
		fmt.Fprintf(stderr, "%s: reload failed, nothing applied (still running %s): %s\n", ans.NodeID, running, ans.Error)
	}
	for _, w := range ans.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	for _, n := range ans.Notes {
		fmt.Fprintf(stdout, "%s: %s\n", ans.NodeID, n)
	}
}
