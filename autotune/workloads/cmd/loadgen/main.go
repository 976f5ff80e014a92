// Command loadgen is an open-loop HTTP load generator in the style of wrk2.
//
// Request i is scheduled at start + i/rate. Its latency is measured from that
// SCHEDULED time (not from the actual send) until the response body has been
// read completely, so a slow server cannot slow the generator down and hide
// its own latency (no coordinated omission). At most -connections requests are
// in flight; further due requests wait in a queue, and their latency keeps
// counting while they wait. If the queue holds more than 10 s worth of
// requests (10 x rate), newly due requests are counted as outcome="dropped"
// instead of being queued. Only loopback targets are allowed, except with
// -in-cluster inside a Kubernetes pod (autotune's in-cluster load, issue 9).
//
// Headers and a body that may carry credentials belong in -request-file, not
// in -header and -body: any user can read a process's arguments
// (/proc/PID/cmdline, ps). The file is read once, at start, and its values are
// never printed.
//
// Metrics on -listen (/metrics, Prometheus text format 0.0.4):
//
//	loadgen_request_duration_seconds   histogram, every completed request (ok and error)
//	loadgen_requests_total{outcome}    counter, outcome = ok | error | dropped
//	loadgen_requests_scheduled_total   counter
//	loadgen_target_rate_per_second     gauge
//	loadgen_in_flight                  gauge
//	loadgen_send_delay_seconds         histogram, scheduled time -> picked up by a worker
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"autotune/workloads/internal/loopback"
	"autotune/workloads/internal/prom"
	"autotune/workloads/internal/shutdown"
)

type headerList []string

func (h *headerList) String() string { return strings.Join(*h, ", ") }
func (h *headerList) Set(v string) error {
	k, _, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("header %q: want \"Key: Value\"", v)
	}
	*h = append(*h, v)
	return nil
}

// requestFile is what -request-file holds.
type requestFile struct {
	Headers map[string]string `json:"headers"`
	Body    *string           `json:"body"`
	// Path replaces -target's path and query: a query may carry credentials
	// (?api_key=...), which an argument would show to every user.
	Path *string `json:"path"`
}

// readRequestFile adds the file's headers to headers and sets body if the file
// has one, and path if it has one. No error quotes a value: they may be
// credentials.
func readRequestFile(path string, headers *headerList, body *string, target *string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rf requestFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rf); err != nil {
		// encoding/json's errors name fields, types and offsets, never a value.
		return fmt.Errorf("%s: want {\"headers\": {\"Key\": \"Value\"}, \"body\": \"...\"}: %v", path, err)
	}
	keys := make([]string, 0, len(rf.Headers))
	for k := range rf.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.TrimSpace(k) == "" || strings.ContainsAny(k, ":\r\n") {
			return fmt.Errorf("%s: header name %q is empty or has ':' or a line break", path, k)
		}
		if strings.ContainsAny(rf.Headers[k], "\r\n") {
			return fmt.Errorf("%s: the value of header %q has a line break", path, k)
		}
		*headers = append(*headers, k+": "+rf.Headers[k])
	}
	if rf.Body != nil {
		*body = *rf.Body
	}
	if rf.Path != nil {
		if !strings.HasPrefix(*rf.Path, "/") {
			return fmt.Errorf("%s: the path must start with /", path)
		}
		*target = *rf.Path
	}
	return nil
}

// withPath is u with its path and query replaced by those of p (a path from
// -request-file), parsed as -target's own path was: appended to its scheme and
// host, so that a path taken before (//x, a space, a #fragment) still is.
func withPath(u *url.URL, p string) (*url.URL, error) {
	ref, err := url.Parse(u.Scheme + "://" + u.Host + p)
	if err != nil || ref.Host != u.Host {
		// url's errors quote the URL: not shown, the query may be a credential.
		return nil, fmt.Errorf("-request-file: the path is not a valid URL path")
	}
	return ref, nil
}

// shown is what the log says of the target: its scheme and host, and its path
// only when it came from -target (a path from -request-file may hold a secret).
func shown(u *url.URL, fromFile bool) string {
	if fromFile {
		return u.Scheme + "://" + u.Host + " (path from -request-file, not shown)"
	}
	return u.String()
}

func checkTarget(raw string, inCluster bool) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("target %q: only http:// is supported", raw)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("target %q: no host", raw)
	}
	if !inCluster && !loopback.Host(u.Hostname()) {
		return nil, fmt.Errorf("target %q: only loopback hosts (127.0.0.0/8, localhost, [::1]) are allowed", raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("target %q: userinfo not supported", raw)
	}
	return u, nil
}

func checkListen(addr string, inCluster bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("bad port %q", port)
	}
	if !inCluster && !loopback.Host(host) {
		return fmt.Errorf("refusing to listen on %q: loopback only", host)
	}
	return nil
}

// loopbackOnly is a net.Dialer Control hook: the resolved peer address must be
// a loopback address, whatever the target host name resolved to.
func loopbackOnly(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("refusing to connect to non-loopback address %s", address)
	}
	return nil
}

type loadgen struct {
	target  string
	method  string
	body    string
	headers http.Header
	host    string
	rate    float64
	client  *http.Client

	queue chan time.Time // scheduled times of due requests

	connections int
	start       time.Time // schedule origin: request i is due at start + i/rate

	hist                  *prom.Histogram
	sendDelay             *prom.Histogram // scheduled time -> picked up by a worker
	scheduled             atomic.Uint64
	ok, errs, dropped     atomic.Uint64
	errTimeout, errTransp atomic.Uint64
	errStatus             atomic.Uint64
	inFlight              atomic.Int64
}

// schedule enqueues request i at start + i/rate until ctx is done.
func (lg *loadgen) schedule(ctx context.Context) {
	start := lg.start
	interval := float64(time.Second) / lg.rate
	at := func(i int64) time.Time { return start.Add(time.Duration(float64(i) * interval)) }
	var i int64
	for {
		if !sleepUntil(ctx, at(i)) {
			return
		}
		now := time.Now()
		due := int64(float64(now.Sub(start))/interval) + 1 // requests with at(i) <= now
		for ; i < due; i++ {
			lg.scheduled.Add(1)
			select {
			case lg.queue <- at(i):
			default:
				lg.dropped.Add(1)
			}
		}
	}
}

// sleepUntil blocks until t (false if ctx ends first). Go timers wake through
// epoll_wait, whose timeout has millisecond granularity, which made sends up
// to ~1 ms late (median ~0.5 ms measured); a blocking nanosleep(2) on the
// scheduler's thread is precise to tens of microseconds. Long waits go through
// a timer first so that cancellation stays prompt.
func sleepUntil(ctx context.Context, t time.Time) bool {
	for {
		if ctx.Err() != nil {
			return false
		}
		d := time.Until(t)
		if d <= 0 {
			return true
		}
		if d > 20*time.Millisecond {
			tm := time.NewTimer(d - 10*time.Millisecond)
			select {
			case <-ctx.Done():
				tm.Stop()
				return false
			case <-tm.C:
			}
			continue
		}
		ts := syscall.NsecToTimespec(int64(d))
		_ = syscall.Nanosleep(&ts, nil) // EINTR: the loop recomputes the remainder
	}
}

func (lg *loadgen) worker(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		var sched time.Time
		select {
		case <-ctx.Done():
			return
		case sched = <-lg.queue:
		}
		lg.sendDelay.Observe(time.Since(sched))
		lg.inFlight.Add(1)
		err := lg.do(ctx)
		lat := time.Since(sched)
		lg.inFlight.Add(-1)
		if ctx.Err() != nil {
			return // shutting down: the aborted request is not a server error
		}
		lg.hist.Observe(lat)
		if err == nil {
			lg.ok.Add(1)
			continue
		}
		lg.errs.Add(1)
		var se statusError
		var ne net.Error
		switch {
		case errors.As(err, &se):
			lg.errStatus.Add(1)
		case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
			lg.errTimeout.Add(1)
		default:
			lg.errTransp.Add(1)
		}
	}
}

type statusError int

func (e statusError) Error() string { return "HTTP status " + strconv.Itoa(int(e)) }

func (lg *loadgen) do(ctx context.Context) error {
	var body io.Reader
	if lg.body != "" {
		body = strings.NewReader(lg.body)
	}
	req, err := http.NewRequestWithContext(ctx, lg.method, lg.target, body)
	if err != nil {
		return err
	}
	for k, v := range lg.headers {
		req.Header[k] = v
	}
	if lg.host != "" {
		req.Host = lg.host
	}
	resp, err := lg.client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return statusError(resp.StatusCode)
	}
	return nil
}

func (lg *loadgen) handleMetrics(w http.ResponseWriter, r *http.Request) {
	var pw prom.Writer
	pw.Histogram("loadgen_request_duration_seconds",
		"Latency from the scheduled send time to the response fully read (open loop, coordinated-omission free); all completed requests, ok and error.", lg.hist)
	pw.Histogram("loadgen_send_delay_seconds",
		"Delay from the scheduled send time until a worker picked the request up (queueing for a free connection plus generator lateness).", lg.sendDelay)
	pw.Header("loadgen_requests_total", "counter", "Requests by outcome: ok (2xx), error (transport error, timeout or non-2xx), dropped (queue over 10 s of backlog).")
	pw.Sample("loadgen_requests_total", float64(lg.ok.Load()), "outcome", "ok")
	pw.Sample("loadgen_requests_total", float64(lg.errs.Load()), "outcome", "error")
	pw.Sample("loadgen_requests_total", float64(lg.dropped.Load()), "outcome", "dropped")
	pw.Header("loadgen_request_errors_total", "counter", "Error outcomes broken down by reason.")
	pw.Sample("loadgen_request_errors_total", float64(lg.errTimeout.Load()), "reason", "timeout")
	pw.Sample("loadgen_request_errors_total", float64(lg.errTransp.Load()), "reason", "transport")
	pw.Sample("loadgen_request_errors_total", float64(lg.errStatus.Load()), "reason", "status")
	pw.Counter("loadgen_requests_scheduled_total", "Requests whose scheduled time has come.", float64(lg.scheduled.Load()))
	pw.Gauge("loadgen_target_rate_per_second", "Configured request rate (-rate).", lg.rate)
	pw.Gauge("loadgen_in_flight", "Requests currently being sent or awaiting a response.", float64(lg.inFlight.Load()))
	pw.Gauge("loadgen_queue_length", "Due requests waiting for a free connection.", float64(len(lg.queue)))
	pw.Gauge("loadgen_connections", "Configured maximum concurrent requests (-connections).", float64(lg.connections))
	pw.Gauge("loadgen_start_time_seconds", "Unix time at which the schedule started.", float64(lg.start.UnixNano())/1e9)
	pw.ProcessCPU()
	pw.Respond(w)
}

func main() {
	target := flag.String("target", "", "target URL, loopback only: http://127.0.0.1:PORT/path, http://localhost:PORT/..., http://[::1]:PORT/... (required)")
	rate := flag.Float64("rate", 0, "requests per second, open loop (required, > 0)")
	listen := flag.String("listen", "", "loopback address for this generator's /metrics and /healthz, e.g. 127.0.0.1:9100 (required)")
	connections := flag.Int("connections", 64, "max concurrent in-flight requests (and kept-alive connections)")
	method := flag.String("method", http.MethodGet, "HTTP method")
	body := flag.String("body", "", "request body")
	var headers headerList
	flag.Var(&headers, "header", "extra request header \"Key: Value\" (repeatable; visible to every user in /proc: credentials go in -request-file)")
	requestPath := flag.String("request-file", "", "JSON file {\"headers\": {\"Key\": \"Value\"}, \"body\": \"...\"}, read at start: headers added to -header's, the body instead of -body's (for credentials: an argument is visible to every user)")
	timeout := flag.Duration("timeout", 5*time.Second, "per-request timeout")
	maxDuration := flag.Duration("max-duration", time.Hour, "dead-man switch: exit by itself after this long")
	inCluster := flag.Bool("in-cluster", false, "run as a Kubernetes pod against a cluster Service: any target host, listen on any address (refused outside a pod: KUBERNETES_SERVICE_HOST must be set)")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("loadgen: ")

	fail := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "loadgen: "+format+"\n", a...)
		os.Exit(2)
	}
	if flag.NArg() > 0 {
		fail("unexpected arguments: %q", flag.Args())
	}
	if *target == "" || *listen == "" {
		fail("-target and -listen are required")
	}
	filePath := ""
	if *requestPath != "" {
		if err := readRequestFile(*requestPath, &headers, body, &filePath); err != nil {
			fail("-request-file: %v", err)
		}
	}
	if *inCluster && os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		fail("-in-cluster: not in a Kubernetes pod (KUBERNETES_SERVICE_HOST is not set)")
	}
	u, err := checkTarget(*target, *inCluster)
	if err != nil {
		fail("%v", err)
	}
	if filePath != "" {
		if u, err = withPath(u, filePath); err != nil {
			fail("%v", err)
		}
	}
	if err := checkListen(*listen, *inCluster); err != nil {
		fail("-listen: %v", err)
	}
	if !(*rate > 0) || math.IsInf(*rate, 0) {
		fail("-rate must be a positive number")
	}
	if *connections < 1 {
		fail("-connections must be >= 1")
	}
	if *timeout <= 0 || *maxDuration <= 0 {
		fail("-timeout and -max-duration must be positive")
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400) // keep the generator itself cheap
	}

	hdr := http.Header{}
	host := ""
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if strings.EqualFold(k, "Host") {
			host = v
			continue
		}
		hdr.Add(k, v)
	}

	dialer := &net.Dialer{Timeout: *timeout, KeepAlive: 30 * time.Second, Control: loopbackOnly}
	if *inCluster {
		dialer.Control = nil // the Service's cluster IP
	}
	transport := &http.Transport{
		Proxy:               nil, // never go through a proxy from the environment
		DialContext:         dialer.DialContext,
		MaxIdleConns:        *connections,
		MaxIdleConnsPerHost: *connections,
		MaxConnsPerHost:     *connections,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	// Queue up to 10 s worth of due requests (bounded to keep memory small).
	qcap := int(math.Min(math.Ceil(10**rate), 1<<20))
	if qcap < 1 {
		qcap = 1
	}
	lg := &loadgen{
		target:  u.String(),
		method:  *method,
		body:    *body,
		headers: hdr,
		host:    host,
		rate:    *rate,
		client: &http.Client{
			Transport: transport,
			Timeout:   *timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse // never follow redirects
			},
		},
		connections: *connections,
		queue:       make(chan time.Time, qcap),
		hist:        prom.NewHistogram(prom.RenardBounds(-4, 1)), // 0.0001 s .. 10 s
		sendDelay:   prom.NewHistogram(prom.RenardBounds(-6, 1)), // 1 µs .. 10 s
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Printf("listen %s: %v", *listen, err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", lg.handleMetrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	sigCtx, stop := shutdown.OnSignal(context.Background())
	defer stop()
	ctx, cancel := context.WithTimeout(sigCtx, *maxDuration)
	defer cancel()

	log.Printf("target=%s rate=%g/s connections=%d timeout=%v max-duration=%v metrics=http://%s/metrics GOMAXPROCS=%d",
		shown(u, filePath != ""), lg.rate, lg.connections, *timeout, *maxDuration, ln.Addr(), runtime.GOMAXPROCS(0))

	var wg sync.WaitGroup
	for i := 0; i < *connections; i++ {
		wg.Add(1)
		go lg.worker(ctx, &wg)
	}
	lg.start = time.Now() // written before the goroutines that read it start
	go lg.schedule(ctx)

	exit := 0
	if err := shutdown.Serve(ctx, srv, ln, time.Second); err != nil {
		log.Printf("metrics server: %v", err)
		exit = 1
	} else if sigCtx.Err() == nil {
		log.Printf("max-duration %v reached, exiting", *maxDuration)
	}
	cancel()
	wg.Wait()
	log.Printf("scheduled=%d ok=%d error=%d dropped=%d (timeout=%d transport=%d status=%d)",
		lg.scheduled.Load(), lg.ok.Load(), lg.errs.Load(), lg.dropped.Load(),
		lg.errTimeout.Load(), lg.errTransp.Load(), lg.errStatus.Load())
	os.Exit(exit)
}
