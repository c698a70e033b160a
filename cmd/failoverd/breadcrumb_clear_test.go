package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
)

// clearStore is an operatorStore holding member records.
type clearStore struct {
	operatorStore // the methods clearBreadcrumb does not use: nil, never called
	members       []cluster.Member
	cleared       bool
}

func (s *clearStore) Members(context.Context) ([]cluster.Member, error) { return s.members, nil }

func (s *clearStore) ClearBreadcrumb(context.Context) error {
	s.cleared = true
	return nil
}

// The breadcrumb tells the next leader whom to fence: clear refuses while
// the node it names runs, needs --force for a readable one whose node is
// gone, and clears an unreadable one as it is.
func TestBreadcrumbClearGuards(t *testing.T) {
	rec, err := breadcrumb.Encode(breadcrumb.Record{NodeID: "node-c", Host: "10.0.0.13", Epoch: 42, Since: time.Unix(1, 0).UTC()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		data    []byte
		members []string
		force   bool
		code    int
		cleared bool
		out     string
	}{
		{"its node runs", rec, []string{"node-a", "node-c"}, false, exitRuntime, false, "refused: the breadcrumb names node-c (epoch 42), whose failoverd is running"},
		{"its node runs, forced", rec, []string{"node-c"}, true, exitRuntime, false, "refused"},
		{"its node gone, not forced", rec, []string{"node-a"}, false, exitRuntime, false, "with --force"},
		{"its node gone, forced", rec, []string{"node-a"}, true, exitOK, true, "of node-c (epoch 42) cleared: the next leader will not fence node-c"},
		{"unreadable", []byte("garbage"), []string{"node-a"}, false, exitOK, true, "unreadable breadcrumb /b cleared"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &clearStore{}
			for _, id := range tc.members {
				s.members = append(s.members, cluster.Member{NodeID: id, State: "standby"})
			}
			var out, errs bytes.Buffer
			code := clearBreadcrumb(context.Background(), s, "/b", tc.data, tc.force, &out, &errs)
			if code != tc.code || s.cleared != tc.cleared || !strings.Contains(out.String()+errs.String(), tc.out) {
				t.Errorf("exit %d (want %d), cleared %v (want %v), output %q%q, want %q", code, tc.code, s.cleared, tc.cleared, out.String(), errs.String(), tc.out)
			}
		})
	}
}
