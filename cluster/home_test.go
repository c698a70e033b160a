package cluster

import (
	"errors"
	"testing"
)

// Admit's verdicts, one per case of its doc comment.
func TestAdmit(t *testing.T) {
	rec := &ClusterRecord{ElectionMode: "fair", ID: "r2", MovedFrom: []string{"r0", "r1"}}
	for _, tc := range []struct {
		name       string
		rec        *ClusterRecord
		mode, home string
		want       string // "", "moved", "mode"
	}{
		{"new node, no record", nil, "fair", "", ""},
		{"node that ran elsewhere, no record", nil, "fair", "r1", "moved"},
		{"new node", rec, "fair", "", ""},
		{"at home", rec, "fair", "r2", ""},
		{"moved here from its home", rec, "fair", "r1", ""},
		{"moved here twice", rec, "fair", "r0", ""},
		{"another cluster's record", rec, "fair", "x", "moved"},
		{"other mode", rec, "unfair", "r2", "mode"},
		{"record moved away", &ClusterRecord{ElectionMode: "fair", ID: "r1", MovedTo: "r2"}, "fair", "r1", "moved"},
		{"record moved away, new node", &ClusterRecord{ElectionMode: "fair", ID: "r1", MovedTo: "r2"}, "fair", "", "moved"},
		{"record without mode", &ClusterRecord{ID: "r"}, "fair", "", "mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Admit(tc.rec, "here", tc.mode, tc.home)
			var mv *MovedError
			var mm *ModeMismatchError
			got := ""
			switch {
			case errors.As(err, &mv):
				got = "moved"
			case errors.As(err, &mm):
				got = "mode"
			case err != nil:
				got = err.Error()
			}
			if got != tc.want {
				t.Fatalf("Admit = %v (%s); want %q", err, got, tc.want)
			}
		})
	}
}
