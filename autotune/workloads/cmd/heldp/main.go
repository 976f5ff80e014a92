// Command heldp measures which kind of "P-blocking" goroutine a Go service can
// survive by raising GOMAXPROCS (benchmarks/blocked_p.py runs it).
//
// Requests arrive open-loop every -every (1 ms) and each does -work of CPU in
// a fresh goroutine; their latency (from the scheduled arrival) is what a
// service's p99 would show. Next to them, -n goroutines of one -mode:
//
//	none  nothing
//	spin  runtime.LockOSThread, then a tight loop: burns a CPU, but async
//	      preemption interrupts it every 10 ms like any goroutine
//	held  package blockedp (what the demo's /debug/chaos/blocked-p injects): a
//	      timerfd read through syscall.RawSyscall, holding the P for -hold
//	      then letting go for -gap
//
// One JSON line: the requests' p50/p99/max, the runtime's scheduling latency
// p99 (/sched/latencies:seconds) and the seconds of P held.
package main

import (
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"time"

	"autotune/workloads/internal/blockedp"
)

func main() {
	mode := flag.String("mode", "none", "none, spin or held")
	n := flag.Int("n", 1, "goroutines of the mode")
	seconds := flag.Duration("for", 5*time.Second, "how long to send requests")
	every := flag.Duration("every", time.Millisecond, "time between two arrivals")
	work := flag.Duration("work", 600*time.Microsecond, "CPU work per request")
	hold := flag.Duration("hold", 20*time.Millisecond, "held: each hold")
	gap := flag.Duration("gap", 20*time.Millisecond, "held: between two holds")
	flag.Parse()

	iters := calibrate(*work)
	stop := make(chan struct{})
	var held blockedp.Holder
	switch *mode {
	case "none":
	case "spin":
		for i := 0; i < *n; i++ {
			go spin(stop)
		}
	case "held":
		if err := held.Start(blockedp.Spec{Goroutines: *n, Hold: *hold, Gap: *gap,
			For: *seconds + time.Second}); err != nil {
			fmt.Fprintln(os.Stderr, "heldp:", err)
			os.Exit(2)
		}
	default:
		fmt.Fprintln(os.Stderr, "heldp: -mode none, spin or held")
		os.Exit(2)
	}

	var mu sync.Mutex
	var lat []float64
	var wg sync.WaitGroup
	start := time.Now()
	for k := 0; ; k++ {
		arrival := start.Add(time.Duration(k) * *every)
		if arrival.Sub(start) >= *seconds {
			break
		}
		time.Sleep(time.Until(arrival))
		wg.Add(1)
		go func() {
			defer wg.Done()
			burn(iters)
			d := time.Since(arrival).Seconds()
			mu.Lock()
			lat = append(lat, d)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(stop)
	held.Stop()
	slices.Sort(lat)
	q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	out := map[string]any{
		"mode": *mode, "n": *n, "gomaxprocs": runtime.GOMAXPROCS(0), "requests": len(lat),
		"work_s": work.Seconds(), "every_s": every.Seconds(),
		"p50_s": q(0.5), "p99_s": q(0.99), "max_s": lat[len(lat)-1],
		"sched_p99_s": schedP99(), "held_s": held.Status().HeldSeconds,
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}

func spin(stop <-chan struct{}) {
	runtime.LockOSThread()
	x := 0
	for {
		select {
		case <-stop:
			return
		default:
		}
		for i := 0; i < 10000; i++ {
			x += i
		}
	}
}

var sink [32]byte

func burn(iters int) {
	h := sha256.Sum256([]byte("heldp"))
	for i := 0; i < iters; i++ {
		h = sha256.Sum256(h[:])
	}
	sink = h
}

// calibrate: sha256 iterations that take d (the fastest of 5 tries).
func calibrate(d time.Duration) int {
	const probe = 20000
	best := time.Hour
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		burn(probe)
		best = min(best, time.Since(t0))
	}
	return max(1, int(float64(probe)*float64(d)/float64(best)))
}

func schedP99() float64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	h := s[0].Value.Float64Histogram()
	var total, acc uint64
	for _, c := range h.Counts {
		total += c
	}
	for i, c := range h.Counts {
		acc += c
		if float64(acc) >= 0.99*float64(total) {
			return h.Buckets[i+1]
		}
	}
	return 0
}
