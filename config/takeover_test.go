package config

import (
	"strings"
	"testing"
)

// Taking over at the leader's deadline needs fair mode on ZooKeeper, and
// is only warned about on etcd, where it does nothing.
func TestTakeOverAtDeadlineRules(t *testing.T) {
	cfg := validConfig()
	cfg.Election.TakeOverAtDeadline = true
	if err := validateNoFiles(cfg); err != nil {
		t.Fatalf("fair mode refused: %v", err)
	}
	cfg.Election.Mode = ModeUnfair
	checkErrors(t, fieldErrorsOrNil(validateNoFiles(cfg)), []string{"election.take_over_at_deadline: needs election.mode fair"})

	cfg, err := Parse([]byte(etcdConfig(`{endpoints: ["127.0.0.1:2379"]}`, "1s")+"\nelection: {take_over_at_deadline: true}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	warned := false
	for _, w := range cfg.Warnings() {
		warned = warned || strings.Contains(w, "election.take_over_at_deadline has no effect on etcd")
	}
	if !warned {
		t.Errorf("no warning that the option does nothing on etcd: %q", cfg.Warnings())
	}
}
