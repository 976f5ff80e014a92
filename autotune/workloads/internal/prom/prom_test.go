package prom

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRenardBounds(t *testing.T) {
	b := RenardBounds(-4, 1)
	if len(b) != 51 || b[0] != 0.0001 || b[len(b)-1] != 10 {
		t.Fatalf("bounds: len=%d first=%v last=%v", len(b), b[0], b[len(b)-1])
	}
	for i := 1; i < len(b); i++ {
		if !(b[i] > b[i-1]) || b[i]/b[i-1] > 1.3 {
			t.Fatalf("bounds not ascending fine: %v %v", b[i-1], b[i])
		}
	}
	if got := FormatFloat(b[2]); got != "0.00016" {
		t.Fatalf("label %q", got)
	}
}

func TestExposition(t *testing.T) {
	h := NewHistogram([]float64{0.001, 0.01})
	h.Observe(500 * time.Microsecond)
	h.Observe(time.Millisecond) // le is inclusive
	h.Observe(time.Second)      // overflow
	var w Writer
	w.Histogram("x_seconds", "A \\ help\nline.", h)
	w.Header("y_total", "counter", "Labelled.")
	w.Sample("y_total", 3, "k", `a"b`, "l", "v")
	w.ProcessCPU()
	rec := httptest.NewRecorder()
	w.Respond(rec)
	if ct := rec.Header().Get("Content-Type"); ct != ContentType {
		t.Fatalf("content type %q", ct)
	}
	want := `# HELP x_seconds A \\ help\nline.
# TYPE x_seconds histogram
x_seconds_bucket{le="0.001"} 2
x_seconds_bucket{le="0.01"} 2
x_seconds_bucket{le="+Inf"} 3
x_seconds_sum 1.0015
x_seconds_count 3
# HELP y_total Labelled.
# TYPE y_total counter
y_total{k="a\"b",l="v"} 3
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total `
	if got := rec.Body.String(); !strings.HasPrefix(got, want) {
		t.Fatalf("got:\n%s\nwant prefix:\n%s", got, want)
	}
}
