module github.com/failoverd/failoverd

go 1.26.0

require (
	github.com/go-zookeeper/zk v1.0.4
	go.yaml.in/yaml/v3 v3.0.6
	golang.org/x/crypto v0.58.0
)

require (
	github.com/oklog/run v1.2.0 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
