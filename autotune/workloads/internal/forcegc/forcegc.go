// Package forcegc is the forced-GC interval (env FORCEGC_INTERVAL_MS) of the
// workloads: the application calling runtime.GC() on a ticker. (The runtime's
// own 2-minute forced GC is a constant and cannot be tuned.)
package forcegc

import (
	"context"
	"runtime"
	"time"
)

// Start calls runtime.GC() every interval, from a goroutine, until ctx is
// done. An interval <= 0 means off: Start does nothing.
func Start(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		return
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				runtime.GC()
			}
		}
	}()
}
