// Command demo is the HTTP service that autotune tunes.
//
// It builds a pointer-rich live heap at start (so GC mark work is real), and
// every GET / (or /work) does a fixed amount of CPU work, allocates short-lived
// garbage and reads/mutates the live heap. /metrics exposes a request-latency
// histogram plus Go runtime metrics under client_golang's names.
//
// Flags: -addr 127.0.0.1:PORT (required, loopback only)
//
// Environment:
//
//	DEMO_LIVE_HEAP_MB   live heap target in MiB        (default 16)
//	DEMO_WORK_US        CPU work per request in µs     (default 300, calibrated at start)
//	DEMO_WORK_ITERS     overrides DEMO_WORK_US with a raw sha256 iteration count
//	DEMO_ALLOC_KB       garbage allocated per request  (default 1024)
//	FORCEGC_INTERVAL_MS runtime.GC() every N ms; 0/unset = off
//	DEBUG_PPROF         1 = serve net/http/pprof under /debug/pprof/ (default off)
//	DEMO_CHAOS          1 = serve /debug/chaos/blocked-p (held Ps, chaos.go; default off)
//	GOMAXPROCS, GOGC, GOMEMLIMIT: honoured natively by the Go runtime.
//
// The defaults were chosen by measurement (see the workloads README): at
// 300 req/s the service uses ~0.5 CPU, about 45% of it in GC (~20 cycles/s at
// GOGC=100), so GC settings visibly move tail latency under a 1-CPU quota
// shared with a CPU hog, while a small live heap keeps GC bursts short and
// runs repeatable.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"autotune/workloads/internal/blockedp"
	"autotune/workloads/internal/forcegc"
	"autotune/workloads/internal/loopback"
	"autotune/workloads/internal/prom"
	"autotune/workloads/internal/shutdown"
)

const (
	defaultLiveHeapMB = 16
	defaultWorkUS     = 300
	defaultAllocKB    = 1024

	heapShards       = 256
	readsPerRequest  = 64 // live-heap items visited per request
	chainLength      = 4  // pointer hops per visited item
	writesPerRequest = 16 // live-heap items mutated per request
	payloadBytes     = 24
	sortLen          = 256
)

type config struct {
	liveHeapMB      int
	workUS          int
	workIters       int // 0 = derive from workUS by calibration
	fanout          int // goroutines sharing one request's work (scatter-gather)
	allocKB         int
	forceGCInterval time.Duration
	debugPprof      bool
	chaos           bool
}

func envInt(name string, def int) (int, error) {
	s, ok := os.LookupEnv(name)
	if !ok || s == "" {
		return def, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%s=%q: want a non-negative integer", name, s)
	}
	return v, nil
}

// envSwitch reads an on/off variable: 1 is on, 0 or unset is off, anything
// else is refused (a typo must not silently leave a debug surface off or on).
func envSwitch(name string) (bool, error) {
	switch s := os.Getenv(name); s {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fmt.Errorf("%s=%q: want 1 (on) or 0/unset (off)", name, s)
	}
}

func loadConfig() (config, error) {
	var c config
	var err error
	var ms int
	for _, e := range []struct {
		name string
		def  int
		dst  *int
	}{
		{"DEMO_LIVE_HEAP_MB", defaultLiveHeapMB, &c.liveHeapMB},
		{"DEMO_WORK_US", defaultWorkUS, &c.workUS},
		{"DEMO_WORK_ITERS", 0, &c.workIters},
		{"DEMO_ALLOC_KB", defaultAllocKB, &c.allocKB},
		{"DEMO_FANOUT", 1, &c.fanout},
		{"FORCEGC_INTERVAL_MS", 0, &ms},
	} {
		if *e.dst, err = envInt(e.name, e.def); err != nil {
			return c, err
		}
	}
	if c.fanout < 1 {
		return c, fmt.Errorf("DEMO_FANOUT=%d: must be >= 1", c.fanout)
	}
	c.forceGCInterval = time.Duration(ms) * time.Millisecond
	if c.debugPprof, err = envSwitch(debugPprofEnv); err != nil {
		return c, err
	}
	if c.chaos, err = envSwitch(chaosEnv); err != nil {
		return c, err
	}
	return c, nil
}

// ---------------------------------------------------------------------------
// Live heap: 256 shards of small items wired into a random pointer graph.

type item struct {
	key     uint64
	next    *item
	kids    [2]*item
	payload []byte
}

type shard struct {
	mu    sync.Mutex
	items []*item
}

type liveHeap struct {
	shards [heapShards]shard
	items  int
}

// Approximate heap bytes per item: 64 (item size class) + 24 (payload) + 8 (slot).
const bytesPerItem = 64 + payloadBytes + 8

func buildLiveHeap(mb int) *liveHeap {
	h := &liveHeap{}
	perShard := mb * (1 << 20) / bytesPerItem / heapShards
	if mb > 0 && perShard < 2 {
		perShard = 2
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for s := range h.shards {
		sh := &h.shards[s]
		sh.items = make([]*item, perShard)
		for i := range sh.items {
			it := &item{key: rng.Uint64(), payload: make([]byte, payloadBytes)}
			binary.LittleEndian.PutUint64(it.payload, it.key)
			sh.items[i] = it
		}
		for _, it := range sh.items {
			it.next = sh.items[rng.IntN(perShard)]
			it.kids[0] = sh.items[rng.IntN(perShard)]
			it.kids[1] = sh.items[rng.IntN(perShard)]
		}
	}
	h.items = perShard * heapShards
	return h
}

// touch reads readsPerRequest items (following pointer chains) and mutates
// writesPerRequest of them: fresh payload allocations hung off old objects and
// pointer re-wiring, which exercises write barriers during GC marking.
func (h *liveHeap) touch(seed uint64) uint64 {
	if h.items == 0 {
		return 0
	}
	sh := &h.shards[seed%heapShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := len(sh.items)
	var acc uint64
	for i := 0; i < readsPerRequest; i++ {
		it := sh.items[rand.IntN(n)]
		for j := 0; j < chainLength; j++ {
			acc += it.key ^ uint64(it.payload[j])
			it = it.kids[j&1].next
		}
	}
	for i := 0; i < writesPerRequest; i++ {
		it := sh.items[rand.IntN(n)]
		p := make([]byte, payloadBytes)
		binary.LittleEndian.PutUint64(p, acc+uint64(i))
		it.payload = p
		it.next = sh.items[rand.IntN(n)]
		it.kids[i&1] = sh.items[rand.IntN(n)]
	}
	return acc
}

// ---------------------------------------------------------------------------
// CPU work: chained sha256 over a 256-byte block.

const workBlock = 256

func spin(iters int, seed uint64) [32]byte {
	var buf [workBlock]byte
	binary.LittleEndian.PutUint64(buf[:], seed)
	var sum [32]byte
	for i := 0; i < iters; i++ {
		copy(buf[8:], sum[:])
		sum = sha256.Sum256(buf[:])
	}
	return sum
}

// calibrate returns the minimum observed ns per spin iteration. Taking the
// minimum over many short trials makes it robust against preemption and CFS
// throttling (the service may already be inside a CPU-limited cgroup).
func calibrate() float64 {
	const iters = 500
	best := time.Duration(1<<63 - 1)
	for trial := 0; trial < 40; trial++ {
		t0 := time.Now()
		spin(iters, uint64(trial))
		if d := time.Since(t0); d < best {
			best = d
		}
	}
	return float64(best.Nanoseconds()) / iters
}

// ---------------------------------------------------------------------------
// Per-request garbage: a linked list of pointer-carrying nodes with byte slices.

type garbage struct {
	next *garbage
	data []byte
}

func allocate(totalBytes int) uint64 {
	var head *garbage
	for remaining := totalBytes; remaining > 0; {
		sz := 64 + rand.IntN(449) // 64..512 bytes
		g := &garbage{next: head, data: make([]byte, sz)}
		g.data[0] = byte(remaining)
		g.data[sz-1] = byte(sz)
		head = g
		remaining -= sz + 32
	}
	var acc uint64
	for g := head; g != nil; g = g.next {
		acc += uint64(g.data[0]) + uint64(g.data[len(g.data)-1])
	}
	return acc
}

// ---------------------------------------------------------------------------

type server struct {
	cfg       config
	workIters int
	nsPerIter float64
	heap      atomic.Pointer[liveHeap]
	latency   *prom.Histogram
	inFlight  atomic.Int64
	runtime   *runtimeCollector
	held      blockedp.Holder // DEMO_CHAOS: goroutines holding their Ps (chaos.go)
}

type workResponse struct {
	OK     bool   `json:"ok"`
	Hash   string `json:"hash"`
	Heap   uint64 `json:"heap"`
	Alloc  uint64 `json:"alloc"`
	Median int64  `json:"median"`
}

func (s *server) handleWork(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	h := s.heap.Load()
	if h == nil {
		http.Error(w, "warming up", http.StatusServiceUnavailable)
		return
	}
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)

	seed := rand.Uint64()
	sum := s.work(seed)

	vals := make([]int64, sortLen)
	for i := range vals {
		vals[i] = rand.Int64()
	}
	slices.Sort(vals)

	resp := workResponse{
		OK:     true,
		Hash:   hex.EncodeToString(sum[:8]),
		Heap:   h.touch(seed),
		Alloc:  allocate(s.cfg.allocKB * 1024),
		Median: vals[sortLen/2],
	}
	body, err := json.Marshal(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	body = append(body, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
	s.latency.Observe(time.Since(start))
}

// work spins the request's CPU work, split over cfg.fanout goroutines that all must finish (a
// scatter-gather handler): with a fan-out, a CPU-starved process piles runnable goroutines up
// in its run queues, which is what schedtrace and the overflow detector look at.
func (s *server) work(seed uint64) [32]byte {
	n := s.cfg.fanout
	if n <= 1 {
		return spin(s.workIters, seed)
	}
	parts := make([][32]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts[i] = spin(s.workIters/n+1, seed+uint64(i))
		}()
	}
	wg.Wait()
	var sum [32]byte
	for _, p := range parts {
		for j := range sum {
			sum[j] ^= p[j]
		}
	}
	return sum
}

func (s *server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	if s.heap.Load() == nil {
		http.Error(w, "warming up", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok"))
}

func (s *server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	var pw prom.Writer
	pw.Histogram("http_request_duration_seconds",
		"Duration of the demo work handler (GET / and /work), server side.", s.latency)
	s.runtime.write(&pw)
	writeCFS(&pw)
	pw.Gauge("demo_forcegc_interval_ms", "Configured FORCEGC_INTERVAL_MS (0 = forced GC off).",
		float64(s.cfg.forceGCInterval.Milliseconds()))
	pw.Gauge("demo_live_heap_target_mb", "Configured DEMO_LIVE_HEAP_MB.", float64(s.cfg.liveHeapMB))
	items, ready := 0, 0.0
	if h := s.heap.Load(); h != nil {
		items, ready = h.items, 1
	}
	pw.Gauge("demo_live_heap_items", "Number of objects in the live heap graph (0 while building).", float64(items))
	pw.Gauge("demo_live_heap_ready", "1 once the live heap is built.", ready)
	pw.Gauge("demo_work_us", "Configured DEMO_WORK_US (CPU work per request).", float64(s.cfg.workUS))
	pw.Gauge("demo_work_iterations", "sha256 iterations per request actually used.", float64(s.workIters))
	pw.Gauge("demo_work_ns_per_iteration", "Calibrated ns per sha256 iteration (min over trials).", s.nsPerIter)
	pw.Gauge("demo_alloc_kb", "Configured DEMO_ALLOC_KB (garbage allocated per request).", float64(s.cfg.allocKB))
	pw.Gauge("demo_requests_in_flight", "Work requests currently being served.", float64(s.inFlight.Load()))
	if s.cfg.chaos {
		held := s.held.Status()
		pw.Counter("demo_blocked_p_held_seconds_total", "Seconds of P held by injected holders (DEMO_CHAOS).", held.HeldSeconds)
		pw.Gauge("demo_blocked_p_goroutines", "Injected goroutines holding their Ps now (DEMO_CHAOS).", float64(held.Goroutines))
	}
	pw.Respond(w)
}

func (s *server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.handleWork)
	mux.HandleFunc("GET /work", s.handleWork)
	mux.HandleFunc("GET /healthz", s.handleHealthz)
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	if s.cfg.debugPprof {
		registerPprof(mux)
	}
	if s.cfg.chaos {
		registerChaos(mux, &s.held)
	}
	return mux
}

func main() {
	addr := flag.String("addr", "", "listen address, loopback only, e.g. 127.0.0.1:8080 (required)")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("demo: ")
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "demo: -addr is required")
		flag.Usage()
		os.Exit(2)
	}
	if err := loopback.CheckListen(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	cfg, err := loadConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}

	s := &server{
		cfg:     cfg,
		latency: prom.NewHistogram(prom.RenardBounds(-4, 1)), // 0.0001 s .. 10 s
		runtime: newRuntimeCollector(),
	}
	s.nsPerIter = calibrate()
	s.workIters = cfg.workIters
	if s.workIters == 0 {
		s.workIters = int(float64(cfg.workUS)*1000/s.nsPerIter + 0.5)
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Printf("listen: %v", err)
		os.Exit(1)
	}
	srv := &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}

	ctx, stop := shutdown.OnSignal(context.Background())
	defer stop()

	log.Printf("listening on %s; GOMAXPROCS=%d GOGC=%q GOMEMLIMIT=%q live_heap_mb=%d work_us=%d (iters=%d, %.0f ns/iter) alloc_kb=%d forcegc=%v pprof=%v",
		ln.Addr(), runtime.GOMAXPROCS(0), os.Getenv("GOGC"), os.Getenv("GOMEMLIMIT"),
		cfg.liveHeapMB, cfg.workUS, s.workIters, s.nsPerIter, cfg.allocKB, cfg.forceGCInterval,
		cfg.debugPprof)

	go func() {
		t0 := time.Now()
		h := buildLiveHeap(cfg.liveHeapMB)
		runtime.GC() // start measurements from a settled heap
		s.heap.Store(h)
		log.Printf("live heap built: %d items in %v", h.items, time.Since(t0).Round(time.Millisecond))
	}()

	forcegc.Start(ctx, cfg.forceGCInterval)

	if err := shutdown.Serve(ctx, srv, ln, 2*time.Second); err != nil {
		log.Printf("serve: %v", err)
		os.Exit(1)
	}
	log.Printf("bye")
}
