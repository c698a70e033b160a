package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// LoadOptions tunes Load and Parse. The zero value is what the daemon uses.
type LoadOptions struct {
	// SkipFileChecks turns off the checks that referenced files (secret
	// files, ssh keys, known_hosts, programs named by absolute path) exist.
	// Only for configs written for another machine, such as the shipped
	// examples; never for a config the daemon is about to run with.
	SkipFileChecks bool
}

// Load reads, decodes and validates the config file at path. See Parse.
func Load(path string) (*Config, error) { return LoadOptions{}.Load(path) }

// Parse decodes and validates a config file's contents; path names the file
// in messages and anchors relative file names (empty: leave them as they are).
//
// Decoding starts from Default and is strict: unknown keys, duplicate keys and
// values of the wrong type are errors. All decoding problems are reported
// together; if there are none, all validation problems are. Either way each
// has its YAML path, in a ValidationErrors that the returned error wraps (use
// errors.As). Relative file names in the config, and
// relative program paths containing a '/', are taken relative to the
// directory of path and stored as absolute paths.
func Parse(data []byte, path string) (*Config, error) { return LoadOptions{}.Parse(data, path) }

// Load is like the package-level Load, with options.
func (o LoadOptions) Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err // *fs.PathError already names the file
	}
	return o.Parse(data, path)
}

// Parse is like the package-level Parse, with options.
func (o LoadOptions) Parse(data []byte, path string) (*Config, error) {
	name := path
	if name == "" {
		name = "<input>"
	}

	// First pass: the document as a node tree, to check its shape and to
	// map decoder messages (which only know line numbers) to YAML paths.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: config file is empty", name)
		}
		return nil, fmt.Errorf("parsing %s: %w", name, err)
	}
	if err := dec.Decode(new(yaml.Node)); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", name, err)
		}
		return nil, fmt.Errorf("%s: more than one YAML document; want exactly one", name)
	}
	if len(doc.Content) == 0 || doc.Content[0].ShortTag() == "!!null" {
		return nil, fmt.Errorf("%s: config file is empty", name)
	}
	if top := doc.Content[0]; top.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: line %d: the top level must be a mapping of keys, got %s", name, top.Line, kindName(top.Kind))
	}

	// Second pass: strict decode on top of the defaults.
	cfg := Default()
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	var errs ValidationErrors
	if err := strict.Decode(cfg); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, fmt.Errorf("parsing %s: %w", name, err)
		}
		errs = translate(te, &doc)
	}
	// The decoder silently truncates 1.5 to 1 for integer keys.
	errs = append(errs, fractions(doc.Content[0], reflect.TypeFor[Config](), "")...)
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b *FieldError) int { return a.Line - b.Line })
		return nil, fmt.Errorf("parsing %s:\n%w", name, errs)
	}

	set := writtenKeys(doc.Content[0])
	if set.etcd && cfg.Etcd == nil {
		cfg.Etcd = &Etcd{} // "etcd:" with no value is still a block
	}
	if path != "" {
		dir, err := filepath.Abs(filepath.Dir(path))
		if err != nil {
			dir = filepath.Dir(path)
		}
		cfg.resolvePaths(dir)
	}
	cfg.applyDefaults()
	if err := cfg.validate(o, set); err != nil {
		return nil, fmt.Errorf("invalid config %s:\n%w", name, err)
	}
	return cfg, nil
}

// written says which keys a file sets, where validation must tell a key
// left out from one holding its default.
type written struct {
	// zooKeeper: the file has a zookeeper key, even with no value.
	zooKeeper bool
	// etcd: the file has an etcd key, even with no value.
	etcd bool
	// backend: coordination.backend has a value (null keeps the default).
	backend bool
	// shutdownTimeout: node.shutdown_timeout has a value.
	shutdownTimeout bool
}

// writtenKeys reads written from the document's top-level mapping.
func writtenKeys(top *yaml.Node) written {
	var w written
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i].Value, top.Content[i+1]
		switch k {
		case "zookeeper":
			w.zooKeeper = true
		case "etcd":
			w.etcd = true
		case "node":
			for j := 0; v.Kind == yaml.MappingNode && j+1 < len(v.Content); j += 2 {
				if v.Content[j].Value == "shutdown_timeout" && v.Content[j+1].ShortTag() != "!!null" {
					w.shutdownTimeout = true
				}
			}
		case "coordination":
			for j := 0; v.Kind == yaml.MappingNode && j+1 < len(v.Content); j += 2 {
				if v.Content[j].Value == "backend" && v.Content[j+1].ShortTag() != "!!null" {
					w.backend = true
				}
			}
		}
	}
	return w
}

// resolvePaths makes relative file names absolute, relative to dir. Program
// names without a '/' are left for a $PATH lookup when they run.
func (c *Config) resolvePaths(dir string) {
	file := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	argv := func(cmd []string) {
		if len(cmd) > 0 && strings.Contains(cmd[0], "/") {
			file(&cmd[0])
		}
	}
	file(&c.Node.Admin.TokenFile)
	if t := c.Node.Admin.TLS; t != nil {
		file(&t.CertFile)
		file(&t.KeyFile)
	}
	if c.ZooKeeper.Auth != nil {
		file(&c.ZooKeeper.Auth.CredentialsFile)
	}
	if e := c.Etcd; e != nil {
		file(&e.PasswordFile)
		if t := e.TLS; t != nil {
			file(&t.CAFile)
			file(&t.CertFile)
			file(&t.KeyFile)
		}
	}
	if c.Health.Exec != nil {
		argv(c.Health.Exec.Command)
	}
	argv(c.Service.Promote.Command)
	argv(c.Service.Demote.Command)
	if p := c.Service.PrePromote; p != nil {
		argv(p.Command)
	}
	if f := c.Service.Follow; f != nil {
		argv(f.Command)
	}
	if p := c.Service.Position; p != nil {
		argv(p.Command)
	}
	for _, m := range c.Fencing.Methods {
		if m.RPC != nil {
			file(&m.RPC.TokenFile)
			file(&m.RPC.CAFile)
		}
		if s := m.SSH; s != nil {
			file(&s.IdentityFile)
			for i := range s.IdentityFiles {
				file(&s.IdentityFiles[i])
			}
			file(&s.KnownHosts)
		}
		if m.Shell != nil {
			argv(m.Shell.Command)
		}
	}
}

// Decoder messages, as go.yaml.in/yaml/v3 words them.
var (
	reLine       = regexp.MustCompile(`^line (\d+)(?:, column (\d+))?: (.*)$`)
	reUnknown    = regexp.MustCompile(`^field (\S+) not found in type (\S+)$`)
	reDuplicate  = regexp.MustCompile(`^field (\S+) already set in type (\S+)$`)
	reDupMapping = regexp.MustCompile(`^mapping key "(.*)" already defined at line (\d+)$`)
	reCannot     = regexp.MustCompile("^cannot unmarshal (\\S+?)(?: `(.*)`)? into (.+)$")
)

// translate turns the decoder's messages into FieldErrors with YAML paths.
func translate(te *yaml.TypeError, doc *yaml.Node) ValidationErrors {
	idx := &nodeIndex{}
	idx.walk(doc.Content[0], "")
	var errs ValidationErrors
	for _, msg := range te.Errors {
		m := reLine.FindStringSubmatch(msg)
		if m == nil {
			errs = append(errs, &FieldError{Msg: msg})
			continue
		}
		line, _ := strconv.Atoi(m[1])
		col, _ := strconv.Atoi(m[2]) // 0 if absent
		fe := &FieldError{Line: line, Msg: m[3]}
		switch rest := m[3]; {
		case reUnknown.MatchString(rest):
			sm := reUnknown.FindStringSubmatch(rest)
			if e := idx.byKey(line, sm[1]); e != nil {
				fe.Path = e.path
			}
			fe.Msg = "unknown key" + suggest(sm[1], knownKeys[sm[2]])
		case reDupMapping.MatchString(rest):
			sm := reDupMapping.FindStringSubmatch(rest)
			if e := idx.byKey(line, sm[1]); e != nil {
				fe.Path = e.path
			}
			fe.Msg = "duplicate key, first set on line " + sm[2]
		case reDuplicate.MatchString(rest):
			sm := reDuplicate.FindStringSubmatch(rest)
			if e := idx.byKey(line, sm[1]); e != nil {
				fe.Path = e.path
			}
			fe.Msg = "duplicate key"
		case reCannot.MatchString(rest):
			sm := reCannot.FindStringSubmatch(rest)
			tag, value, into := sm[1], sm[2], sm[3]
			e := idx.byValue(line, tag, value)
			if e != nil {
				fe.Path, value = e.path, e.value
			}
			fe.Msg = "want " + wantName(into) + ", got " + gotName(tag, value)
		default: // our own messages (Duration's), which give the column
			if e := idx.byColumn(line, col); e != nil {
				fe.Path = e.path
			}
		}
		errs = append(errs, fe)
	}
	return errs
}

func wantName(goType string) string {
	switch {
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "an integer"
	case goType == "[]string":
		return "a list of strings"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(strings.TrimPrefix(goType, "*"), "config."):
		return "a mapping"
	}
	return goType
}

func gotName(tag, value string) string {
	switch tag {
	case "!!seq":
		return "a list"
	case "!!map":
		return "a mapping"
	case "!!str":
		return strconv.Quote(value)
	}
	return value
}

// suggest names the closest known key, or lists them all.
func suggest(key string, known []string) string {
	if len(known) == 0 {
		return ""
	}
	best, bestDist := "", 3 // at most 2 edits away
	for _, k := range known {
		if d := editDistance(key, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf("; did you mean %s?", best)
	}
	return "; known keys: " + strings.Join(known, ", ")
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// knownKeys maps a struct type's name, as the decoder prints it
// ("config.Node"), to its YAML keys.
var knownKeys = func() map[string][]string {
	m := map[string][]string{}
	var visit func(t reflect.Type)
	visit = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || m[t.String()] != nil {
			return
		}
		var keys []string
		for f := range t.Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" && name != "-" {
				keys = append(keys, name)
			}
		}
		m[t.String()] = keys
		for f := range t.Fields() {
			visit(f.Type)
		}
	}
	visit(reflect.TypeFor[Config]())
	return m
}()

// nodeIndex records where each value of the document sits.
type nodeIndex struct{ entries []*indexEntry }

type indexEntry struct {
	keyLine   int    // line of the mapping key; 0 for list items
	key       string // mapping key; "" for list items
	valueLine int
	valueCol  int
	tag       string // short tag of the value ("!!str", "!!seq", ...)
	value     string // scalar value
	path      string // YAML path, "fencing.methods[1].ssh"
	used      bool
}

func (x *nodeIndex) walk(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			x.entries = append(x.entries, &indexEntry{keyLine: k.Line, key: k.Value, valueLine: v.Line, valueCol: v.Column, tag: v.ShortTag(), value: v.Value, path: p})
			x.walk(v, p)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			x.entries = append(x.entries, &indexEntry{valueLine: v.Line, valueCol: v.Column, tag: v.ShortTag(), value: v.Value, path: p})
			x.walk(v, p)
		}
	}
	// Aliases are not followed: they could loop, and errors in them are
	// reported at the anchor's line anyway.
}

// byKey returns the first unused entry whose key is key, on line.
func (x *nodeIndex) byKey(line int, key string) *indexEntry {
	for _, e := range x.entries {
		if !e.used && e.keyLine == line && e.key == key {
			e.used = true
			return e
		}
	}
	return nil
}

// byColumn returns the entry whose value starts at line and col.
func (x *nodeIndex) byColumn(line, col int) *indexEntry {
	for _, e := range x.entries {
		if e.valueLine == line && e.valueCol == col {
			return e
		}
	}
	return nil
}

// byValue returns the first unused entry on line with the given tag ("scalar"
// for any scalar) and value, falling back to the only candidate on that line.
// A value ending in "..." is a prefix: the decoder shortens long values.
func (x *nodeIndex) byValue(line int, tag, value string) *indexEntry {
	var candidates []*indexEntry
	for _, e := range x.entries {
		scalar := e.tag != "!!seq" && e.tag != "!!map"
		if !e.used && e.valueLine == line && (e.tag == tag || (tag == "scalar" && scalar)) {
			candidates = append(candidates, e)
		}
	}
	prefix, shortened := strings.CutSuffix(value, "...")
	i := slices.IndexFunc(candidates, func(e *indexEntry) bool {
		return e.value == value || (shortened && strings.HasPrefix(e.value, prefix))
	})
	switch {
	case i >= 0:
	case len(candidates) == 1:
		i = 0
	default:
		return nil
	}
	candidates[i].used = true
	return candidates[i]
}

// fractions reports integer keys written with a fraction ("fall: 1.5"),
// walking the document alongside the Go type it decodes into.
func fractions(n *yaml.Node, t reflect.Type, path string) ValidationErrors {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var errs ValidationErrors
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		fields := map[string]reflect.Type{}
		for f := range t.Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" {
				fields[name] = f.Type
			}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if ft, ok := fields[k]; ok {
				p := k
				if path != "" {
					p = path + "." + k
				}
				errs = append(errs, fractions(n.Content[i+1], ft, p)...)
			}
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, v := range n.Content {
			errs = append(errs, fractions(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64 && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float":
		errs = append(errs, &FieldError{Path: path, Line: n.Line, Msg: "want an integer, got " + n.Value})
	}
	return errs
}

// LoadLenient decodes the file at path on top of Default without
// validating it, skipping unknown keys and values of the wrong type, and
// takes relative file names as Load does. It is for tools that need a few
// keys of a file that may be invalid: failoverd reload reads the admin
// API's address and token file from it.
func LoadLenient(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg := Default()
	if err := yaml.Unmarshal(data, cfg); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, fmt.Errorf("parsing %s: %w", path, err)
		}
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		dir = filepath.Dir(path)
	}
	cfg.resolvePaths(dir)
	cfg.applyDefaults()
	return cfg, nil
}
