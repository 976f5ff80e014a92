package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"autotune/workloads/internal/prom"
)

func TestCheckTarget(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:8080/", "http://localhost:1/x", "http://[::1]:9/"} {
		if _, err := checkTarget(ok, false); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://10.0.0.1/", "https://127.0.0.1/", "http://example.com/", "http://0.0.0.0:80/", "ftp://127.0.0.1/"} {
		if _, err := checkTarget(bad, false); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// In a pod (-in-cluster) the target is a Service and Prometheus scrapes the pod's IP; the
// scheme, userinfo and host checks stay.
func TestInClusterAllowsServicesAndAnyListenAddress(t *testing.T) {
	if _, err := checkTarget("http://api.shop.svc:8080/", true); err != nil {
		t.Errorf("service target refused: %v", err)
	}
	for _, bad := range []string{"https://api.shop.svc/", "http://u:p@api.shop.svc/", "http:///x"} {
		if _, err := checkTarget(bad, true); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if err := checkListen(":9100", true); err != nil {
		t.Errorf("listen :9100 refused in a pod: %v", err)
	}
	if err := checkListen(":9100", false); err == nil {
		t.Errorf("listen :9100 accepted outside a pod")
	}
}

func newTestLoadgen(target string, rate float64, conns int) *loadgen {
	return &loadgen{
		target:      target,
		method:      http.MethodGet,
		headers:     http.Header{},
		rate:        rate,
		client:      &http.Client{Timeout: 5 * time.Second},
		connections: conns,
		queue:       make(chan time.Time, int(10*rate)),
		hist:        prom.NewHistogram(prom.RenardBounds(-4, 1)),
		sendDelay:   prom.NewHistogram(prom.RenardBounds(-6, 1)),
	}
}

// A server that stalls for 300 ms while the generator keeps its schedule: the
// requests due during the stall must show latencies from their scheduled time,
// i.e. the generator must not be slowed down (open loop).
func TestOpenLoopNoCoordinatedOmission(t *testing.T) {
	var stall atomic.Bool
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stall.Load() {
			<-release // held until the stall ends
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()

	lg := newTestLoadgen(srv.URL, 200, 64)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < lg.connections; i++ {
		wg.Add(1)
		go lg.worker(ctx, &wg)
	}
	lg.start = time.Now()
	go lg.schedule(ctx)

	time.Sleep(200 * time.Millisecond)
	stall.Store(true)
	time.Sleep(300 * time.Millisecond)
	stall.Store(false)
	close(release)
	time.Sleep(300 * time.Millisecond)
	cancel()
	wg.Wait()

	counts, _ := lg.hist.Snapshot()
	var total, over100ms uint64
	for i, c := range counts {
		total += c
		if i == len(lg.hist.Bounds) || lg.hist.Bounds[i] > 0.1 {
			over100ms += c
		}
	}
	sched := lg.scheduled.Load()
	// ~160 requests scheduled in 0.8 s regardless of the stall.
	if sched < 140 || sched > 180 {
		t.Fatalf("scheduled %d requests in 0.8 s at 200/s", sched)
	}
	// The stall covered ~60 scheduled requests; at least the first ~40 of them
	// waited more than 100 ms counted from their scheduled time.
	if over100ms < 25 {
		t.Fatalf("only %d of %d requests over 100 ms; latency not measured from schedule?", over100ms, total)
	}
	if lg.errs.Load() != 0 || lg.dropped.Load() != 0 {
		t.Fatalf("errors=%d dropped=%d", lg.errs.Load(), lg.dropped.Load())
	}
}

func TestMetricsNames(t *testing.T) {
	lg := newTestLoadgen("http://127.0.0.1:1/", 10, 4)
	rec := httptest.NewRecorder()
	lg.handleMetrics(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, s := range []string{
		`loadgen_request_duration_seconds_bucket{le="0.0001"} 0`,
		`loadgen_requests_total{outcome="ok"} 0`,
		`loadgen_requests_total{outcome="error"} 0`,
		`loadgen_requests_total{outcome="dropped"} 0`,
		"# TYPE loadgen_requests_scheduled_total counter",
		"loadgen_target_rate_per_second 10",
		"# TYPE loadgen_in_flight gauge",
	} {
		if !strings.Contains(body, s) {
			t.Errorf("missing %q", s)
		}
	}
}

// Headers and a body with credentials come from -request-file (an argument is
// visible to every user); its errors never quote a value.
func TestReadRequestFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := dir + "/" + name
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	headers := headerList{"Accept: text/plain"}
	body := "from -body"
	target := ""
	ok := write("ok.json", `{"headers": {"X-Api-Key": "s3cret", "Content-Type": "application/json"}, "body": "{\"k\": \"s3cret\"}"}`)
	if err := readRequestFile(ok, &headers, &body, &target); err != nil {
		t.Fatal(err)
	}
	want := headerList{"Accept: text/plain", "Content-Type: application/json", "X-Api-Key: s3cret"}
	if strings.Join(headers, "|") != strings.Join(want, "|") || body != `{"k": "s3cret"}` {
		t.Errorf("headers %q body %q", headers, body)
	}
	kept := "from -body"
	if err := readRequestFile(write("nobody.json", `{"headers": {}}`), &headers, &kept, &target); err != nil || kept != "from -body" {
		t.Errorf("a file without a body replaced -body's: %q (%v)", kept, err)
	}
	for name, text := range map[string]string{
		"linebreak.json": `{"headers": {"X-Api-Key": "s3cret\r\nX-Evil: 1"}}`,
		"name.json":      `{"headers": {"": "s3cret"}}`,
		"type.json":      `{"headers": {"X-Api-Key": 5}, "body": "s3cret"}`,
		"unknown.json":   `{"header": {"X-Api-Key": "s3cret"}}`,
		"broken.json":    `{"headers": {"X-Api-Key": "s3cret"`,
		"relative.json":  `{"path": "api?key=s3cret"}`,
	} {
		var h headerList
		var b string
		err := readRequestFile(write(name, text), &h, &b, &target)
		if err == nil {
			t.Errorf("%s accepted", name)
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error quotes a value: %v", name, err)
		}
	}
	if err := readRequestFile(dir+"/missing.json", &headers, &body, &target); err == nil {
		t.Error("a missing file accepted")
	}
}

func TestThePathOfTheRequestFileReplacesTheTargetsAndIsNotShown(t *testing.T) {
	// Review finding: ?api_key=... on -target was readable in /proc/PID/cmdline and
	// written to the log.
	path := t.TempDir() + "/r.json"
	if err := os.WriteFile(path, []byte(`{"path": "/api/items?api_key=s3cret&x=1"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var h headerList
	var b, p string
	if err := readRequestFile(path, &h, &b, &p); err != nil {
		t.Fatal(err)
	}
	base, err := checkTarget("http://127.0.0.1:8080", false)
	if err != nil {
		t.Fatal(err)
	}
	u, err := withPath(base, p)
	if err != nil {
		t.Fatal(err)
	}
	if u.String() != "http://127.0.0.1:8080/api/items?api_key=s3cret&x=1" {
		t.Errorf("target %s", u)
	}
	// What -target took before the path moved: a double slash, a space, a fragment.
	for p, want := range map[string]string{
		"//x/y?k=1": "http://127.0.0.1:8080//x/y?k=1",
		"/a b":      "http://127.0.0.1:8080/a%20b",
		"/a#frag":   "http://127.0.0.1:8080/a#frag",
	} {
		got, err := withPath(base, p)
		if err != nil || got.String() != want {
			t.Errorf("%q: %v %v", p, got, err)
		}
	}
	if _, err := withPath(base, "/%zz?key=s3cret"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a bad escape: %v", err)
	}
	if strings.Contains(shown(u, true), "s3cret") || !strings.Contains(shown(u, true), "127.0.0.1:8080") {
		t.Errorf("the log shows %q", shown(u, true))
	}
}
