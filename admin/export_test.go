package admin

import (
	"log/slog"
	"net/http"
	"time"
)

// NewServerFor returns a Server for any handler, so that the server's own
// behaviour (binding, graceful shutdown) is tested apart from the API.
func NewServerFor(listen string, h http.Handler) *Server {
	return newServer(listen, h, nil, slog.New(slog.DiscardHandler))
}

// WithHistory serves GET /v1/history from src in front of next, on the
// clock now.
func WithHistory(next http.Handler, src HistorySource, now func() time.Time) http.Handler {
	return withHistoryClock(next, src, now)
}
