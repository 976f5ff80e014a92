// Package shutdown is the workloads' graceful stop: SIGINT or SIGTERM ends the
// serving context, then http.Server.Shutdown gets a bounded time to drain.
package shutdown

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"
)

// OnSignal returns a context that is cancelled by SIGINT or SIGTERM (and the
// stop function that releases the signal handler).
func OnSignal(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, syscall.SIGTERM, syscall.SIGINT)
}

// Serve serves srv on ln until ctx is done, then shuts srv down, waiting at
// most grace for in-flight requests. It returns the error that stopped serving
// early, or nil after a shutdown (running out of grace is not an error).
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration) error {
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Printf("shutdown: %v", err)
	}
	return nil
}
