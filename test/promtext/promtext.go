// Package promtext reads a Prometheus text page (etcd's /metrics) into
// sums the benches compare before and after a phase.
package promtext

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Scrape reads the Prometheus text page at url: every sample's value by
// metric name, summed over its labels; for grpc_server_msg_received_total
// also by "name|grpc_method", and streams that ended as
// "stream_ended|method".
func Scrape(url string) (map[string]float64, error) {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name, labels, _ := strings.Cut(line[:i], "{")
		out[name] += v
		if name == "grpc_server_msg_received_total" {
			out[name+"|"+label(labels, "grpc_method")] += v
		}
		if name == "grpc_server_handled_total" && label(labels, "grpc_type") != "unary" {
			out["stream_ended|"+label(labels, "grpc_method")] += v
		}
	}
	return out, sc.Err()
}

// label is one label's value in a sample's `k="v",...}` text.
func label(labels, key string) string {
	for _, kv := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}
