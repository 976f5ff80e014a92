// Command echo is a deliberately small, different HTTP service used to test
// "tune your own service". It exposes NO Go runtime metrics on purpose: a
// tuner must report runtime diagnostics as unavailable for it.
//
// Flags: --port N (listens on 127.0.0.1:N, required)
// Env:   ECHO_GREETING (echoed in the X-Echo-Greeting header of /ping and /ready)
//
//	FORCEGC_INTERVAL_MS  runtime.GC() every N ms; 0/unset = off
//	GOMAXPROCS, GOGC, GOMEMLIMIT are honoured natively by the Go runtime.
//
// Endpoints: GET /ping  -> "pong" after a little CPU work and allocation
//
//	GET /ready -> 200 "ready"
//	GET /stats -> http_request_duration_seconds (default client_golang buckets)
//	              and process_cpu_seconds_total, nothing else.
package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"autotune/workloads/internal/forcegc"
	"autotune/workloads/internal/prom"
	"autotune/workloads/internal/shutdown"
)

// client_golang's prometheus.DefBuckets.
var defBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

var sink byte

func ping(greeting string, latency *prom.Histogram) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// A little CPU work and allocation: ~64 KiB of short-lived buffers.
		var sum [32]byte
		bufs := make([][]byte, 0, 64)
		for i := 0; i < 64; i++ {
			b := make([]byte, 1024)
			copy(b, sum[:])
			sum = sha256.Sum256(b)
			bufs = append(bufs, b)
		}
		sink = bufs[len(bufs)-1][0] ^ sum[0]
		if greeting != "" {
			w.Header().Set("X-Echo-Greeting", greeting)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("pong"))
		latency.Observe(time.Since(start))
	}
}

func main() {
	port := flag.Int("port", 0, "TCP port to listen on at 127.0.0.1 (required)")
	flag.Parse()
	log.SetPrefix("echo: ")
	if *port <= 0 || *port > 65535 {
		fmt.Fprintln(os.Stderr, "echo: --port N (1-65535) is required")
		os.Exit(2)
	}
	forceGC := 0
	if s := os.Getenv("FORCEGC_INTERVAL_MS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			fmt.Fprintf(os.Stderr, "echo: FORCEGC_INTERVAL_MS=%q: want a non-negative integer\n", s)
			os.Exit(2)
		}
		forceGC = v
	}
	greeting := os.Getenv("ECHO_GREETING")
	latency := prom.NewHistogram(defBuckets)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /ping", ping(greeting, latency))
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		if greeting != "" {
			w.Header().Set("X-Echo-Greeting", greeting)
		}
		_, _ = w.Write([]byte("ready"))
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		var pw prom.Writer
		pw.Histogram("http_request_duration_seconds", "Duration of GET /ping, server side.", latency)
		pw.ProcessCPU()
		pw.Respond(w)
	})

	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		log.Printf("listen: %v", err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := shutdown.OnSignal(context.Background())
	defer stop()
	forcegc.Start(ctx, time.Duration(forceGC)*time.Millisecond)
	log.Printf("listening on %s", ln.Addr())
	if err := shutdown.Serve(ctx, srv, ln, 2*time.Second); err != nil {
		log.Printf("serve: %v", err)
		os.Exit(1)
	}
}
