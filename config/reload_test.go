package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReloadRulesCoverConfig: every key of Config, every optional block and
// every list of blocks has exactly one row in ReloadRules, and every row
// names one of them. A new key fails here until it is classified.
func TestReloadRulesCoverConfig(t *testing.T) {
	paths := ReloadPaths()
	var rows []string
	for _, r := range ReloadRules {
		if slices.Contains(rows, r.Path) {
			t.Errorf("ReloadRules: %s has two rows", r.Path)
		}
		rows = append(rows, r.Path)
		if r.Reload != Reloadable && r.Reload != Restart {
			t.Errorf("ReloadRules: %s: no decision", r.Path)
		}
		if r.Reload == Restart && r.Note == "" {
			t.Errorf("ReloadRules: %s needs a restart but does not say why", r.Path)
		}
	}
	for _, p := range paths {
		if !slices.Contains(rows, p) {
			t.Errorf("config key %s has no row in ReloadRules: decide whether a reload may change it", p)
		}
	}
	for _, r := range rows {
		if !slices.Contains(paths, r) {
			t.Errorf("ReloadRules row %s names no config key", r)
		}
	}
	if len(paths) < 80 {
		t.Errorf("ReloadPaths found only %d keys: the walk misses some", len(paths))
	}
}

// TestCompareForReloadEveryKey changes each key of ReloadRules alone and
// checks that CompareForReload reports exactly that key, with its YAML
// path, refused exactly when its row says Restart.
func TestCompareForReloadEveryKey(t *testing.T) {
	for _, r := range ReloadRules {
		t.Run(r.Path, func(t *testing.T) {
			cur, next := validConfig(), validConfig()
			path := changeAt(t, cur, next, r.Path)
			got := CompareForReload(cur, cur, next)
			if len(got) != 1 || got[0].Path != path {
				t.Fatalf("changing %s alone: changes %v, want exactly %s", path, got, path)
			}
			refused := got[0].Refused != ""
			if refused != (r.Reload == Restart) {
				t.Errorf("%s: refused %v (%q), want refused %v", path, refused, got[0].Refused, r.Reload == Restart)
			}
			if refused && !strings.HasPrefix(got[0].String(), path+": ") {
				t.Errorf("refusal %q does not start with the key's YAML path", got[0].String())
			}
			if len(Refused(got)) != map[bool]int{true: 1, false: 0}[refused] {
				t.Errorf("Refused(%v) = %v", got, Refused(got))
			}
		})
	}
}

// The demote budget sized the lease at start: service.demote.timeout may
// come down and go back up to its value at start, never above it.
func TestCompareForReloadDemoteTimeout(t *testing.T) {
	start := validConfig()
	start.Service.Demote.Timeout = Duration(time.Second)
	lower := validConfig()
	lower.Service.Demote.Timeout = Duration(500 * time.Millisecond)
	if got := Refused(CompareForReload(start, start, lower)); len(got) != 0 {
		t.Errorf("lowering service.demote.timeout refused: %v", got)
	}
	if got := Refused(CompareForReload(start, lower, start)); len(got) != 0 {
		t.Errorf("raising service.demote.timeout back to its value at start refused: %v", got)
	}
	higher := validConfig()
	higher.Service.Demote.Timeout = Duration(2 * time.Second)
	got := Refused(CompareForReload(start, lower, higher))
	if len(got) != 1 || got[0].Path != "service.demote.timeout" || !strings.Contains(got[0].Refused, "1s") {
		t.Errorf("raising service.demote.timeout above its value at start: refused %v, want service.demote.timeout naming 1s", got)
	}
}

func TestCompareForReloadUnchanged(t *testing.T) {
	if got := CompareForReload(validConfig(), validConfig(), validConfig()); len(got) != 0 {
		t.Errorf("identical configs: changes %v", got)
	}
}

// changeAt makes cur and next differ at the key of row (a YAML path with
// "[]" for list indexes) and nowhere else, and returns the path with
// index 0 in place of "[]". A key inside an optional block gets the block
// in both; a row of a block (or list) adds it to next only.
func changeAt(t *testing.T, cur, next *Config, row string) string {
	t.Helper()
	segs := strings.Split(strings.ReplaceAll(row, "[]", ".[]"), ".")
	a, b := reflect.ValueOf(cur).Elem(), reflect.ValueOf(next).Elem()
	for i, s := range segs {
		last := i == len(segs)-1
		a, b = step(t, a, s, last), step(t, b, s, last)
		if !last {
			continue
		}
		switch {
		case a.Kind() == reflect.Pointer && a.Type().Elem().Kind() == reflect.Struct:
			a.Set(reflect.Zero(a.Type()))
			b.Set(reflect.New(b.Type().Elem()))
		case a.Kind() == reflect.Slice && a.Type().Elem().Kind() == reflect.Struct:
			b.Set(reflect.Append(b, reflect.New(b.Type().Elem()).Elem()))
		default:
			flip(t, b, row)
		}
	}
	return strings.ReplaceAll(row, "[]", "[0]")
}

// step goes from v to its part s (a yaml key or "[]"), making an absent
// block or an empty list there; the last part is left as it is.
func step(t *testing.T, v reflect.Value, s string, last bool) reflect.Value {
	t.Helper()
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		v = v.Elem()
	}
	if s == "[]" {
		if v.Len() == 0 {
			v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
		}
		return v.Index(0)
	}
	for i := range v.NumField() {
		if yamlName(v.Type().Field(i)) == s {
			f := v.Field(i)
			if !last && f.Kind() == reflect.Pointer && f.IsNil() {
				f.Set(reflect.New(f.Type().Elem()))
			}
			return f
		}
	}
	t.Fatalf("%s: no key %q in %s", s, s, v.Type())
	return reflect.Value{}
}

// flip changes the value v; for a duration it lowers a set one (a raised
// service.demote.timeout is refused on purpose).
func flip(t *testing.T, v reflect.Value, row string) {
	t.Helper()
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
			return
		}
		n := reflect.New(v.Type().Elem())
		n.Elem().Set(v.Elem())
		v.Set(n)
		v = n.Elem()
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int:
		v.SetInt(v.Int() + 1)
	case reflect.Int64:
		if v.Int() > int64(time.Millisecond) {
			v.SetInt(v.Int() - int64(time.Millisecond))
		} else {
			v.SetInt(v.Int() + int64(time.Second))
		}
	case reflect.Slice:
		v.Set(reflect.Append(reflect.AppendSlice(reflect.MakeSlice(v.Type(), 0, v.Len()+1), v), reflect.ValueOf("x")))
	default:
		t.Fatalf("%s: cannot change a %s", row, v.Kind())
	}
}
