// Package config holds failoverd's configuration file: one YAML document
// whose shape is the Config type (keys are the yaml tags, in snake_case).
// configs/failoverd.yaml in the repository documents every key.
//
// Load and Parse start from Default, decode strictly (unknown keys,
// duplicate keys and wrongly typed values are errors), fill the defaults of
// list elements, and validate. Problems are reported all at once (first
// every decoding problem; if there is none, every validation problem), each
// with its YAML path, as a ValidationErrors wrapped in the returned error:
//
//	fencing.methods[1].ssh.known_hosts: file not found: /etc/failoverd/known_hosts
//	health: exactly one of http, tcp, exec must be set
//	node.admin.tokn_file: unknown key; did you mean token_file? (line 5)
//
// Durations are written as Go duration strings ("5s", "250ms") and held as
// Duration; convert with time.Duration(d). Relative file names are taken
// relative to the config file's directory and stored as absolute paths.
//
// # Secrets
//
// Secrets are never written in the file, only referenced by file name
// (node.admin.token_file, zookeeper.auth.credentials_file, ssh keys). They
// are read when needed with Config.ReadToken, Config.ReadCredentials and
// Config.RPCToken, which return a Secret: a string that prints,
// marshals and logs as "<secret>". A secret file that group or others may
// access is refused, by validation (with its YAML path) and when it is read
// (package internal/secret, which the ssh fencer uses for its keys too).
//
// # What is not checked
//
// Validation is static. It checks that referenced files exist and can be
// opened, not that keys parse, that hosts resolve or that ZooKeeper is
// reachable. Programs named without a '/' are looked up in $PATH only when
// they run. LoadOptions.SkipFileChecks turns the file checks off for configs
// written for another machine.
//
// This package depends only on the standard library, go.yaml.in/yaml/v3 and
// two small internal packages (internal/ids, the name rules it shares with
// the breadcrumb; internal/secret); cmd/failoverd maps Config onto the plain
// Go configs of the other packages. Values it mirrors rather than imports
// (the election's lease rule, the hooks' kill grace) say so where defined.
package config
