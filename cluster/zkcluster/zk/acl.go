package zk

import (
	"context"
	"errors"
	"fmt"
	"strings"

	gozk "github.com/go-zookeeper/zk"
)

// Permission bits of an ACL entry.
const (
	PermRead   = gozk.PermRead
	PermWrite  = gozk.PermWrite
	PermCreate = gozk.PermCreate
	PermDelete = gozk.PermDelete
	PermAdmin  = gozk.PermAdmin
	PermAll    = gozk.PermAll
)

// ACL is one entry of a znode's access control list.
type ACL struct {
	Perms  int32
	Scheme string // "world", "digest", "ip", ...
	ID     string // "anyone", "user:base64(sha1(user:password))", ...
}

// String is the entry as ZooKeeper's CLI writes it: scheme:id:cdrwa.
func (a ACL) String() string {
	var b strings.Builder
	for _, p := range []struct {
		bit int32
		c   byte
	}{{PermCreate, 'c'}, {PermDelete, 'd'}, {PermRead, 'r'}, {PermWrite, 'w'}, {PermAdmin, 'a'}} {
		if a.Perms&p.bit != 0 {
			b.WriteByte(p.c)
		}
	}
	return a.Scheme + ":" + a.ID + ":" + b.String()
}

func formatACL(acl []ACL) string {
	s := make([]string, len(acl))
	for i, a := range acl {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// ErrUnsafeACL says a znode on a protected path may be changed by someone
// other than us and we may not fix it. The error wrapping it (an
// *UnsafeACLError) names the znode and its ACL.
var ErrUnsafeACL = errors.New("zk: unsafe ACL")

// UnsafeACLError names a znode whose ACL lets others change it.
type UnsafeACLError struct {
	Path string
	ACL  []ACL
	User string // our digest user
}

func (e *UnsafeACLError) Error() string {
	return fmt.Sprintf("zk: znode %s has ACL %s: others than digest user %q may change it, "+
		"and it is not ours to fix (no ADMIN for that user by name); "+
		"restrict everyone else to READ (setAcl) or delete it", e.Path, formatACL(e.ACL), e.User)
}

func (e *UnsafeACLError) Unwrap() error { return ErrUnsafeACL }

// ACL reads a znode's ACL; Stat.Aversion is the version SetACL compares.
func (s *Session) ACL(ctx context.Context, p string) ([]ACL, Stat, error) {
	var acl []gozk.ACL
	var st *gozk.Stat
	err := s.call(ctx, func() (err error) { acl, st, err = s.conn.GetACL(p); return })
	if err != nil {
		return nil, Stat{}, err
	}
	out := make([]ACL, len(acl))
	for i, a := range acl {
		out[i] = ACL{Perms: a.Perms, Scheme: strings.Clone(a.Scheme), ID: strings.Clone(a.ID)}
	}
	return out, toStat(st), nil
}

// SetACL gives a znode the client's ACL (the one Create uses) if its ACL
// version matches (-1: any version).
func (s *Session) SetACL(ctx context.Context, p string, version int32) (Stat, error) {
	var st *gozk.Stat
	err := s.write(ctx, func() (err error) { st, err = s.conn.SetACL(p, s.client.acl, version); return })
	if err != nil {
		return Stat{}, err
	}
	return toStat(st), nil
}

// CheckACLs makes sure that nobody but us can change p or any of its
// existing ancestors, so that nobody else can delete, replace or add
// znodes where failoverd keeps its state (its election, its breadcrumb
// with the admin URL its fencer sends a token to).
//
// The rule, per znode: every ACL entry that is not our digest identity may
// grant READ and nothing else. A znode that breaks it is fixed (given the
// client's ACL: all for us, READ for the world) when its ACL grants ADMIN to
// our identity by name, that is, when it is ours; otherwise CheckACLs fails
// with an *UnsafeACLError naming the znode and its ACL. ADMIN granted to
// world:anyone does not make a znode ours: a shared parent (say /services)
// is left for its owner to fix, failoverd does not take it over.
//
// The root znode "/" is skipped: it belongs to the ensemble, ZooKeeper
// creates it open to all, and changing it would affect every other user.
// Put zookeeper.root on a znode of its own.
//
// Without Auth there is no identity to protect and CheckACLs does nothing:
// open-ACL mode trusts everyone who can reach the ensemble.
func (s *Session) CheckACLs(ctx context.Context, p string) error {
	if s.client.cfg.Auth == nil {
		return nil
	}
	cur := ""
	for _, part := range strings.Split(strings.Trim(p, "/"), "/") {
		if part == "" {
			continue
		}
		cur += "/" + part
		exists, err := s.checkACL(ctx, cur)
		if err != nil {
			return err
		}
		if !exists {
			return nil // nor do its children
		}
	}
	return nil
}

// checkACL applies CheckACLs' rule to one znode and reports whether it
// exists.
func (s *Session) checkACL(ctx context.Context, p string) (bool, error) {
	for attempt := 0; ; attempt++ {
		acl, st, err := s.ACL(ctx, p)
		if errors.Is(err, ErrNoNode) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading the ACL of %s: %w", p, err)
		}
		if s.client.safeACL(acl) {
			return true, nil
		}
		if !s.client.ownsACL(acl) {
			return true, &UnsafeACLError{Path: p, ACL: acl, User: s.client.cfg.Auth.User}
		}
		_, err = s.SetACL(ctx, p, st.Aversion)
		if errors.Is(err, ErrBadVersion) && attempt < 3 {
			continue // changed meanwhile: look again
		}
		if err != nil {
			return true, fmt.Errorf("fixing the ACL of %s (was %s): %w", p, formatACL(acl), err)
		}
		s.log.Warn("znode could be changed by others; restricted its ACL to us (all) and the world (read)",
			"path", p, "old_acl", formatACL(acl))
		return true, nil
	}
}

// safeACL: only our identity may do more than read.
func (c *Client) safeACL(acl []ACL) bool {
	for _, a := range acl {
		if a.Perms&^PermRead != 0 && !c.isUs(a) {
			return false
		}
	}
	return true
}

// ownsACL: the ACL grants ADMIN to our identity by name.
func (c *Client) ownsACL(acl []ACL) bool {
	for _, a := range acl {
		if a.Perms&PermAdmin != 0 && c.isUs(a) {
			return true
		}
	}
	return false
}

func (c *Client) isUs(a ACL) bool {
	return c.cfg.Auth != nil && a.Scheme == c.ident.Scheme && a.ID == c.ident.ID
}

// protect runs CheckACLs on every path, retrying within the session when
// the connection is lost.
func (s *Session) protect(ctx context.Context, paths []string) error {
	for _, p := range paths {
		for {
			err := s.CheckACLs(ctx, p)
			if err == nil {
				break
			}
			if !errors.Is(err, ErrConnectionLoss) || s.dead() || ctx.Err() != nil {
				return err
			}
			if err := s.waitConnected(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}
