package forcegc

import (
	"context"
	"runtime/metrics"
	"testing"
	"time"
)

func forcedGCs() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func TestStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	before := forcedGCs()
	Start(ctx, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	cancel()
	time.Sleep(20 * time.Millisecond) // let the goroutine see the cancellation
	ran := forcedGCs() - before
	if ran < 3 {
		t.Fatalf("%d forced GCs in 100 ms at a 10 ms interval", ran)
	}
	time.Sleep(50 * time.Millisecond)
	if after := forcedGCs() - before; after > ran+1 {
		t.Fatalf("still forcing GCs after cancel: %d -> %d", ran, after)
	}
	Start(context.Background(), 0) // off: no goroutine, no panic
}
