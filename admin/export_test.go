package admin

import (
	"log/slog"
	"net/http"
)

// NewServerFor returns a Server for any handler, so that the server's own
// behaviour (binding, graceful shutdown) is tested apart from the API.
func NewServerFor(listen string, h http.Handler) *Server {
	return newServer(listen, h, nil, slog.New(slog.DiscardHandler))
}
