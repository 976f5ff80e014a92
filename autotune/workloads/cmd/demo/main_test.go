package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"autotune/workloads/internal/prom"
)

func TestMergeRuntimeHistogram(t *testing.T) {
	h := &metrics.Float64Histogram{
		Counts:  []uint64{1, 2, 3, 4, 5},
		Buckets: []float64{math.Inf(-1), 1e-6, 2e-6, 1e-3, 0.05, math.Inf(1)},
	}
	bounds := []float64{1e-6, 1e-3, 0.01, 1}
	counts, sum := mergeRuntimeHistogram(h, bounds)
	// [-Inf,1e-6)->le 1e-6; [1e-6,2e-6)->le 1e-3; [2e-6,1e-3)->le 1e-3; [1e-3,0.05)->le 1; [0.05,+Inf)->+Inf
	want := []uint64{1, 5, 0, 4, 5}
	for i := range want {
		if counts[i] != want[i] {
			t.Fatalf("counts %v, want %v", counts, want)
		}
	}
	wantSum := 2*1.5e-6 + 3*(2e-6+1e-3)/2 + 4*(1e-3+0.05)/2 + 5*0.05
	if math.Abs(sum-wantSum) > 1e-12 {
		t.Fatalf("sum %v want %v", sum, wantSum)
	}
}

func TestMetricsExposition(t *testing.T) {
	s := &server{latency: prom.NewHistogram(prom.RenardBounds(-4, 1)), runtime: newRuntimeCollector(), workIters: 10}
	s.heap.Store(buildLiveHeap(1))
	rec := httptest.NewRecorder()
	s.handleWork(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != 200 {
		t.Fatalf("work: %d", rec.Code)
	}
	s.latency.Observe(3 * time.Millisecond)
	rec = httptest.NewRecorder()
	s.handleMetrics(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("content type %q", ct)
	}
	body := rec.Body.String()
	for _, name := range []string{
		"http_request_duration_seconds", "go_sched_pauses_total_gc_seconds", "go_sched_latencies_seconds",
		"go_cpu_classes_idle_cpu_seconds_total", "go_cpu_classes_total_cpu_seconds_total",
		"go_cpu_classes_user_cpu_seconds_total", "go_cpu_classes_gc_total_cpu_seconds_total",
		"go_cpu_classes_scavenge_total_cpu_seconds_total", "go_sched_gomaxprocs_threads",
		"go_gc_cycles_total_gc_cycles_total", "go_gc_cycles_forced_gc_cycles_total",
		"go_gc_cycles_automatic_gc_cycles_total", "go_gc_gogc_percent", "go_gc_gomemlimit_bytes",
		"go_memory_classes_heap_objects_bytes", "go_goroutines", "go_sched_goroutines_goroutines",
		"go_sched_goroutines_runnable_goroutines",
		"go_info", "process_cpu_seconds_total", "go_gc_duration_seconds", "demo_forcegc_interval_ms",
	} {
		if !strings.Contains(body, "# TYPE "+name+" ") || !strings.Contains(body, "# HELP "+name+" ") {
			t.Errorf("missing HELP/TYPE for %s", name)
		}
	}
	for _, line := range []string{
		`http_request_duration_seconds_bucket{le="0.0001"} `,
		`http_request_duration_seconds_bucket{le="+Inf"} 2`,
		`http_request_duration_seconds_count 2`,
		`go_gc_duration_seconds{quantile="0.5"}`,
		`go_info{version="go`,
	} {
		if !strings.Contains(body, line) {
			t.Errorf("missing %q", line)
		}
	}
	// Cumulative buckets must be non-decreasing and end at _count.
	var prev float64
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "go_sched_latencies_seconds_bucket") {
			var v float64
			f := strings.Fields(l)
			if _, err := fmt.Sscan(f[len(f)-1], &v); err != nil || v < prev {
				t.Fatalf("bad bucket line %q (prev %v)", l, prev)
			}
			prev = v
		}
	}
}

func TestDebugPprofEnv(t *testing.T) {
	for value, want := range map[string]bool{"": false, "0": false, "1": true} {
		t.Setenv("DEBUG_PPROF", value)
		c, err := loadConfig()
		if err != nil || c.debugPprof != want {
			t.Errorf("DEBUG_PPROF=%q: debugPprof=%v err=%v, want %v", value, c.debugPprof, err, want)
		}
	}
	for _, bad := range []string{"yes", "true", "2", " 1"} {
		t.Setenv("DEBUG_PPROF", bad)
		if _, err := loadConfig(); err == nil || !strings.Contains(err.Error(), "DEBUG_PPROF") {
			t.Errorf("DEBUG_PPROF=%q: err=%v, want a DEBUG_PPROF error", bad, err)
		}
	}
}

func fetch(url string) (int, []byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	code, body, err := fetch(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return code, body
}

func TestPprofOnlyWhenEnabled(t *testing.T) {
	newServer := func(on bool) *httptest.Server {
		s := &server{cfg: config{debugPprof: on}, latency: prom.NewHistogram(prom.RenardBounds(-4, 1)),
			runtime: newRuntimeCollector(), workIters: 10}
		s.heap.Store(buildLiveHeap(1))
		srv := httptest.NewServer(s.routes())
		t.Cleanup(srv.Close)
		return srv
	}

	off := newServer(false)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/profile?seconds=1",
		"/debug/pprof/trace?seconds=0.1", "/debug/pprof/goroutine"} {
		if code, _ := get(t, off.URL+path); code != http.StatusNotFound {
			t.Errorf("pprof off: %s answered %d, want 404", path, code)
		}
	}
	if code, _ := get(t, off.URL+"/metrics"); code != http.StatusOK {
		t.Errorf("pprof off: /metrics answered %d", code)
	}

	on := newServer(true)
	if code, body := get(t, on.URL+"/debug/pprof/"); code != http.StatusOK ||
		!bytes.Contains(body, []byte("profile")) {
		t.Errorf("pprof on: index answered %d: %.200s", code, body)
	}
	if code, body := get(t, on.URL+"/debug/pprof/goroutine?debug=1"); code != http.StatusOK ||
		!bytes.Contains(body, []byte("goroutine profile")) {
		t.Errorf("pprof on: goroutine answered %d: %.200s", code, body)
	}
	// The trace and the CPU profile block for their duration; run them together, as
	// autotune's capture does.
	// (t.Fatal may not be called from these goroutines: errors travel in the result.)
	type result struct {
		code int
		body []byte
		err  error
	}
	trace, cpu := make(chan result, 1), make(chan result, 1)
	go func() {
		code, body, err := fetch(on.URL + "/debug/pprof/trace?seconds=0.3")
		trace <- result{code, body, err}
	}()
	go func() {
		code, body, err := fetch(on.URL + "/debug/pprof/profile?seconds=1")
		cpu <- result{code, body, err}
	}()
	for i := 0; i < 50; i++ { // some work for the trace and the profile to see
		rec := httptest.NewRecorder()
		on.Config.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	}
	if r := <-trace; r.err != nil || r.code != http.StatusOK || !bytes.HasPrefix(r.body, []byte("go 1.")) {
		t.Errorf("trace: %d %v, %q...", r.code, r.err, r.body[:min(len(r.body), 16)])
	}
	if r := <-cpu; r.err != nil || r.code != http.StatusOK || !bytes.HasPrefix(r.body, []byte{0x1f, 0x8b}) {
		t.Errorf("profile: %d %v, %q...", r.code, r.err, r.body[:min(len(r.body), 16)])
	}
}

func TestChaosEndpointOnlyWhenEnabledAndItsLifecycle(t *testing.T) {
	newServer := func(on bool) (*httptest.Server, *server) {
		s := &server{cfg: config{chaos: on}, latency: prom.NewHistogram(prom.RenardBounds(-4, 1)),
			runtime: newRuntimeCollector(), workIters: 10}
		s.heap.Store(buildLiveHeap(1))
		srv := httptest.NewServer(s.routes())
		t.Cleanup(srv.Close)
		t.Cleanup(s.held.Stop)
		return srv, s
	}
	call := func(method, url string) (int, string) {
		req, _ := http.NewRequest(method, url, nil)
		req.Header.Set("X-Autotune-Chaos", "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	off, _ := newServer(false)
	if code, _ := call(http.MethodPost, off.URL+"/debug/chaos/blocked-p?goroutines=1&hold=1ms&gap=1ms&for=1s"); code == http.StatusOK {
		t.Fatal("chaos off: the endpoint answered")
	}
	on, s := newServer(true)
	url := on.URL + "/debug/chaos/blocked-p"
	// without the header (what a web page could send): refused
	if resp, err := http.Post(url+"?goroutines=1&hold=1ms&gap=1ms&for=1s", "text/plain", nil); err != nil ||
		resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a request without X-Autotune-Chaos: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if code, _ := call(http.MethodPost, url+"?goroutines=0&hold=1ms&gap=1ms&for=1s"); code != http.StatusBadRequest {
		t.Errorf("goroutines=0 answered %d, want 400", code)
	}
	if code, body := call(http.MethodPost, url+"?goroutines=2&hold=5ms&gap=5ms&for=30s"); code != http.StatusOK ||
		!strings.Contains(body, `"goroutines":2`) {
		t.Fatalf("start: %d %s", code, body)
	}
	if code, _ := call(http.MethodPost, url+"?goroutines=1&hold=5ms&gap=5ms&for=30s"); code != http.StatusConflict {
		t.Errorf("a second start answered %d, want 409", code)
	}
	for s.held.Status().HeldSeconds == 0 { // a hold completed: the Ps were held
		time.Sleep(time.Millisecond)
	}
	rec := httptest.NewRecorder()
	s.handleMetrics(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "demo_blocked_p_goroutines 2") {
		t.Errorf("metrics do not show the holders:\n%s", rec.Body.String())
	}
	if code, body := call(http.MethodDelete, url); code != http.StatusOK || !strings.Contains(body, `"goroutines":0`) {
		t.Fatalf("stop: %d %s", code, body)
	}
}
