// Package etcdcluster keeps failoverd's cluster records in etcd: the
// coordination contract of package cluster (Elector, Records, Term) on
// etcd's keys, leases and transactions.
package etcdcluster
