//go:build linux

package blockedp

import (
	"runtime"
	"testing"
	"time"
)

// With one P and one holder, every other goroutine waits out each hold: five
// 10 ms sleeps of this goroutine take about five holds (1 s), not 50 ms. With
// syscall.Syscall instead of RawSyscall the scheduler would hand the P on and
// the sleeps would take 50 ms. Stop ends a hold at once.
func TestAHeldPIsLostToOtherGoroutinesAndStopEndsTheHoldAtOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var h Holder
	if err := h.Start(Spec{Goroutines: 1, Hold: 200 * time.Millisecond, Gap: time.Millisecond,
		For: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := h.Start(Spec{Goroutines: 1, Hold: time.Millisecond, For: time.Second}); err != ErrActive {
		t.Fatalf("a second Start: %v, want ErrActive", err)
	}
	began := time.Now()
	for i := 0; i < 5; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(began); took < 400*time.Millisecond {
		t.Fatalf("five 10ms sleeps took %v: the P was not held", took)
	}
	if s := h.Status(); s.Goroutines != 1 || s.HeldSeconds < 0.4 {
		t.Fatalf("status while holding: %+v", s)
	}
	stopped := time.Now()
	h.Stop()
	if took := time.Since(stopped); took > 150*time.Millisecond {
		t.Fatalf("Stop took %v: it must fire the holder's timer, not wait out the hold", took)
	}
	if s := h.Status(); s.Goroutines != 0 || s.Holding != 0 {
		t.Fatalf("after Stop: %+v", s)
	}
	if err := h.Start(Spec{Goroutines: 2, Hold: time.Millisecond, For: time.Second}); err != nil {
		t.Fatalf("Start after Stop: %v", err)
	}
	h.Stop()
}

func TestAHolderEndsByItselfAfterFor(t *testing.T) {
	var h Holder
	if err := h.Start(Spec{Goroutines: 2, Hold: 5 * time.Millisecond, Gap: time.Millisecond,
		For: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	h.done.Wait() // the dead-man switch: no Stop
	if s := h.Status(); s.Goroutines != 0 || s.HeldSeconds <= 0 {
		t.Fatalf("after For: %+v", s)
	}
}
