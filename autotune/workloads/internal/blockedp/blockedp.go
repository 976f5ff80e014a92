//go:build linux

// Package blockedp makes goroutines hold their P without running Go code: the
// Go scheduler design's "long blocking G". Each holder reads a timerfd through
// syscall.RawSyscall, which (unlike syscall.Syscall) does not tell the
// scheduler it is entering a system call, so sysmon never hands the P to
// another thread: for the whole hold the P is lost to every other goroutine,
// and a stop-the-world (GC) waits for the hold to end. Async preemption cannot
// interrupt it either (the signal lands in the syscall's assembly, not at a
// safe point; the read restarts under the runtime's SA_RESTART handlers).
//
// Unlike the other candidate, a tight loop after runtime.LockOSThread: async
// preemption interrupts that loop every 10 ms like any goroutine, so it takes
// CPU, not a P (it is CPU stress from inside the process). A held P takes no
// CPU, only the P: one more P gives back exactly what it took. Measured in
// benchmarks/blocked_p.py (docs/measurements/blocked-p-*.txt).
//
// The holds are timed by the kernel (the timerfd), not by Go timers: with
// every P held, no P would be left to run a Go timer that ends a hold.
package blockedp

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Spec is one injection: Goroutines holders, each holding its P for Hold,
// letting go for Gap, until For has passed (a dead-man switch) or Stop.
type Spec struct {
	Goroutines int
	Hold, Gap  time.Duration
	For        time.Duration
}

// Status is what a caller verifies: the holders alive, those inside a hold
// right now, and the seconds of P held by all holders since the process began.
type Status struct {
	Goroutines  int     `json:"goroutines"`
	Holding     int     `json:"holding"`
	HeldSeconds float64 `json:"held_seconds"`
}

// ErrActive is returned by Start while an earlier injection still runs.
var ErrActive = errors.New("an injection of held Ps is active; DELETE it first")

// Holder runs at most one injection at a time.
type Holder struct {
	mu      sync.Mutex
	stop    chan struct{}
	fds     []int
	done    sync.WaitGroup
	alive   atomic.Int32
	holding atomic.Int32
	held    atomic.Int64 // nanoseconds
}

// Start launches the holders. It returns once each has its timerfd.
func (h *Holder) Start(s Spec) error {
	if s.Goroutines < 1 || s.Hold <= 0 || s.Gap < 0 || s.For <= 0 {
		return errors.New("want goroutines >= 1, hold > 0, gap >= 0, for > 0")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.alive.Load() > 0 {
		return ErrActive
	}
	h.stopLocked() // the timers of an injection that ended at its For are closed now
	h.stop = make(chan struct{})
	for i := 0; i < s.Goroutines; i++ {
		fd, err := timerfd()
		if err != nil {
			h.stopLocked()
			return err
		}
		h.fds = append(h.fds, fd)
		h.alive.Add(1)
		h.done.Add(1)
		go h.hold(fd, s, h.stop, time.Now().Add(s.For))
	}
	return nil
}

func (h *Holder) hold(fd int, s Spec, stop <-chan struct{}, deadline time.Time) {
	defer func() { // the fd is closed by Stop, never here: Stop may still be arming it
		h.alive.Add(-1)
		h.done.Done()
	}()
	var expirations uint64
	for time.Now().Before(deadline) {
		select {
		case <-stop:
			return
		default:
		}
		if arm(fd, s.Hold) != nil {
			return
		}
		// Stop closes stop and then fires every timer: checked after arming, a Stop that
		// came before the arm is seen here, one after it fires the timer just armed.
		select {
		case <-stop:
			return
		default:
		}
		h.holding.Add(1)
		t0 := time.Now()
		// The P is held from here until the kernel's timer fires (or Stop fires it).
		syscall.RawSyscall(syscall.SYS_READ, uintptr(fd),
			uintptr(unsafe.Pointer(&expirations)), unsafe.Sizeof(expirations))
		h.held.Add(int64(time.Since(t0)))
		h.holding.Add(-1)
		select {
		case <-stop:
			return
		case <-time.After(s.Gap):
		}
	}
}

// Stop ends the injection and returns once every holder has exited.
func (h *Holder) Stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopLocked()
}

func (h *Holder) stopLocked() {
	if h.stop != nil {
		close(h.stop)
		h.stop = nil
	}
	for _, fd := range h.fds {
		arm(fd, time.Nanosecond) // a holder inside a hold wakes now
	}
	h.done.Wait()
	for _, fd := range h.fds {
		syscall.Close(fd)
	}
	h.fds = h.fds[:0]
}

// Status reads the counters.
func (h *Holder) Status() Status {
	return Status{
		Goroutines:  int(h.alive.Load()),
		Holding:     int(h.holding.Load()),
		HeldSeconds: float64(h.held.Load()) / 1e9,
	}
}

func timerfd() (int, error) {
	fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, 1, /* CLOCK_MONOTONIC */
		syscall.O_CLOEXEC, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// arm sets the timer to fire once, d from now (a closed fd only fails).
func arm(fd int, d time.Duration) error {
	spec := [2]syscall.Timespec{{}, syscall.NsecToTimespec(d.Nanoseconds())} // interval, value
	_, _, errno := syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, uintptr(fd), 0,
		uintptr(unsafe.Pointer(&spec)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
