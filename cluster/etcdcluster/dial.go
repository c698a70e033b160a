package etcdcluster

import (
	"crypto/tls"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DialConfig says how to reach an etcd cluster.
type DialConfig struct {
	Endpoints []string // host:port or URLs of the etcd members' client ports
	// DialTimeout bounds the first connection (0: 5s).
	DialTimeout time.Duration
	// TLS is the client's TLS setup (nil: plain TCP).
	TLS *tls.Config
	// Username and Password authenticate the client (empty: none).
	Username, Password string
}

// Dial returns a client of the etcd cluster. The client's gRPC keepalive
// pings an idle connection, so that a dead member is noticed without a
// request; the client's own logging is silenced (the Store logs what
// matters).
func Dial(cfg DialConfig) (*clientv3.Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcdcluster: no endpoints")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	return clientv3.New(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		TLS:                  cfg.TLS,
		Username:             cfg.Username,
		Password:             cfg.Password,
		Logger:               zap.NewNop(),
	})
}
