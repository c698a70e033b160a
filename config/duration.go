package config

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/failoverd/failoverd/internal/secret"
)

// Duration is a time.Duration written in YAML as a Go duration string such as
// "5s", "250ms" or "1m30s". A bare 0 is accepted; other numbers without a
// unit are rejected rather than read as nanoseconds. Convert with
// time.Duration(d).
type Duration time.Duration

// String returns the duration in time.Duration's format ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML parses a duration string. Errors are reported as
// *yaml.TypeError so that decoding goes on and every bad value is reported.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf(
			"line %d, column %d: want a duration like \"5s\" or \"250ms\", got %s", n.Line, n.Column, kindName(n.Kind))}}
	}
	v, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		why := `want a number with a unit, like "5s" or "250ms"`
		if durationSyntax.MatchString(strings.TrimSpace(n.Value)) {
			why = "out of range" // ParseDuration fails only on overflow then
		}
		return &yaml.TypeError{Errors: []string{fmt.Sprintf(
			"line %d, column %d: invalid duration %q: %s", n.Line, n.Column, n.Value, why)}}
	}
	*d = Duration(v)
	return nil
}

// durationSyntax matches what time.ParseDuration accepts, ignoring range.
var durationSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// MarshalYAML writes the duration as a string, so it reads back unchanged.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	}
	return "a scalar"
}

// Secret is a value read from a secret file; it never prints (see
// secret.Secret, which it is, so that packages that receive a secret need
// not import config).
type Secret = secret.Secret

// ReadSecretFile reads a secret from path, trimming surrounding white space.
// An empty secret is an error, and so is a file that group or others may
// access (a *secret.PermissionError that names the file, its mode and the
// fix): see internal/secret.
func ReadSecretFile(path string) (Secret, error) {
	if path == "" {
		return "", errors.New("reading secret: no file configured")
	}
	b, err := secret.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading secret: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("reading secret %s: file is empty", path)
	}
	return Secret(s), nil
}

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }
