// Command toyservice is the example primary/standby service that failoverd
// manages in the demo, the integration tests and the chaos suite. One binary,
// three jobs:
//
//	toyservice [serve] -listen ADDR -state DIR -node ID [-store URL] [-write-interval D]
//	                   [-unhealthy-file PATH] [-standby]
//	    the service of one node: GET /health, POST /admin/health?ok=,
//	    GET /role, POST /promote?epoch=N, POST /demote[?epoch=N], POST /write
//
//	toyservice store -listen ADDR -dir DIR
//	    the shared fenced resource: POST /write, GET /stats, GET /health
//
//	toyservice hook promote|demote|fence|health ...
//	    failoverd hooks (see hook.go); examples/scripts wrap them
//
// See examples/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(args)
	case "store":
		return store(args)
	case "hook":
		return runHook(args, osHookEnv())
	case "help":
		fmt.Println("usage: toyservice [serve|store|hook] [flags]; toyservice CMD -h for flags")
		return 0
	}
	fmt.Fprintf(os.Stderr, "toyservice: unknown command %q; want serve, store or hook\n", cmd)
	return 2
}

func serve(args []string) int {
	fs := flag.NewFlagSet("toyservice serve", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "host:port to serve on (port 0 picks one)")
	state := fs.String("state", "", "state directory; role.json lives here (required)")
	node := fs.String("node", "", "node id, as in failoverd's node.id (required)")
	storeURL := fs.String("store", "", "base URL of the shared fenced store; empty: a private store in -state")
	interval := fs.Duration("write-interval", 0, "while primary, write to the store this often (0: only on POST /write)")
	unhealthy := fs.String("unhealthy-file", "", "while this file exists, /health answers 503")
	standby := fs.Bool("standby", false, "start as standby even if role.json says primary")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *state == "" || *node == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "toyservice serve: -state and -node are required, and no arguments")
		return 2
	}
	svc, err := NewService(ServiceConfig{
		Node: *node, StateDir: *state, StoreURL: *storeURL, UnhealthyFile: *unhealthy,
		Standby: *standby, Log: os.Stdout,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "toyservice:", err)
		return 1
	}
	defer svc.Close()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *interval > 0 {
		go svc.RunWriter(ctx, *interval)
	}
	return listenAndServe(ctx, *listen, svc.Handler(), svc.log)
}

func store(args []string) int {
	fs := flag.NewFlagSet("toyservice store", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8090", "host:port to serve on (port 0 picks one)")
	dir := fs.String("dir", "", "directory for max_epoch.json and decisions.jsonl (required)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "toyservice store: -dir is required, and no arguments")
		return 2
	}
	st, err := OpenStore(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "toyservice store:", err)
		return 1
	}
	defer st.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := newEventLog(os.Stdout)
	log.Event("store_start", "max_epoch", st.Stats().MaxEpoch)
	return listenAndServe(ctx, *listen, st.Handler(), log)
}

// listenAndServe serves h until ctx ends, then shuts down within 2s. It logs
// a "listening" event with the real address (useful with port 0).
func listenAndServe(ctx context.Context, addr string, h http.Handler, log *eventLog) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "toyservice:", err)
		return 1
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Event("listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		fmt.Fprintln(os.Stderr, "toyservice:", err)
		return 1
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "toyservice: shutdown:", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "toyservice:", err)
	}
	log.Event("stopped")
	return 0
}
