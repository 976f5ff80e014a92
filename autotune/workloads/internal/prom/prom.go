// Package prom writes the Prometheus text exposition format 0.0.4 by hand,
// standard library only: fixed-bucket histograms, counters, gauges and
// process_cpu_seconds_total, shared by every workload of this module.
package prom

import (
	"bytes"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// ContentType is the Content-Type of the text exposition format 0.0.4.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// RenardBounds returns histogram upper bounds following the Renard R10 series
// (1, 1.25, 1.6, 2, 2.5, 3.15, 4, 5, 6.3, 8 per decade, i.e. ~1.26x per step)
// from 10^minExp up to and including 10^maxExp. Bounds are parsed from decimal
// strings, so the `le` labels print as short exact decimals ("0.00016").
func RenardBounds(minExp, maxExp int) []float64 {
	mantissas := []string{"1", "1.25", "1.6", "2", "2.5", "3.15", "4", "5", "6.3", "8"}
	var out []float64
	for e := minExp; e <= maxExp; e++ {
		for _, m := range mantissas {
			v, err := strconv.ParseFloat(m+"e"+strconv.Itoa(e), 64)
			if err != nil {
				panic(err)
			}
			out = append(out, v)
			if e == maxExp {
				return out // stop at exactly 10^maxExp
			}
		}
	}
	return out
}

// Histogram is a lock-free fixed-bucket histogram of durations.
type Histogram struct {
	Bounds   []float64       // ascending upper bounds (le), +Inf implicit; read-only
	counts   []atomic.Uint64 // non-cumulative; len(Bounds)+1, last = overflow (+Inf)
	sumNanos atomic.Int64
}

// NewHistogram returns an empty histogram with the given ascending upper bounds.
func NewHistogram(bounds []float64) *Histogram {
	return &Histogram{Bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// Observe records one duration.
func (h *Histogram) Observe(d time.Duration) {
	s := d.Seconds()
	// smallest i with Bounds[i] >= s, i.e. the first bucket whose le admits s.
	i := sort.SearchFloat64s(h.Bounds, s)
	h.counts[i].Add(1)
	h.sumNanos.Add(int64(d))
}

// Snapshot returns non-cumulative counts (len(Bounds)+1, last is +Inf) and the sum in seconds.
func (h *Histogram) Snapshot() ([]uint64, float64) {
	c := make([]uint64, len(h.counts))
	for i := range h.counts {
		c[i] = h.counts[i].Load()
	}
	return c, float64(h.sumNanos.Load()) / 1e9
}

// Writer accumulates one exposition; the zero value is ready to use.
type Writer struct {
	b bytes.Buffer
}

// FormatFloat formats a sample value or an `le` label as Prometheus does.
func FormatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
var labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)

// Header writes the # HELP and # TYPE lines of a metric family.
func (w *Writer) Header(name, typ, help string) {
	w.b.WriteString("# HELP ")
	w.b.WriteString(name)
	w.b.WriteByte(' ')
	w.b.WriteString(helpEscaper.Replace(help))
	w.b.WriteString("\n# TYPE ")
	w.b.WriteString(name)
	w.b.WriteByte(' ')
	w.b.WriteString(typ)
	w.b.WriteByte('\n')
}

// Sample writes one line; labels is a list of name, value pairs.
func (w *Writer) Sample(name string, v float64, labels ...string) {
	w.b.WriteString(name)
	if len(labels) > 0 {
		w.b.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				w.b.WriteByte(',')
			}
			w.b.WriteString(labels[i])
			w.b.WriteString(`="`)
			w.b.WriteString(labelEscaper.Replace(labels[i+1]))
			w.b.WriteByte('"')
		}
		w.b.WriteByte('}')
	}
	w.b.WriteByte(' ')
	w.b.WriteString(FormatFloat(v))
	w.b.WriteByte('\n')
}

// Gauge writes a gauge family with one unlabelled sample.
func (w *Writer) Gauge(name, help string, v float64) {
	w.Header(name, "gauge", help)
	w.Sample(name, v)
}

// Counter writes a counter family with one unlabelled sample.
func (w *Writer) Counter(name, help string, v float64) {
	w.Header(name, "counter", help)
	w.Sample(name, v)
}

// HistogramFrom writes a histogram given upper bounds, NON-cumulative counts
// (len(bounds)+1, last is the +Inf overflow) and a sum.
func (w *Writer) HistogramFrom(name, help string, bounds []float64, counts []uint64, sum float64) {
	w.Header(name, "histogram", help)
	var cum uint64
	for i, b := range bounds {
		cum += counts[i]
		w.Sample(name+"_bucket", float64(cum), "le", FormatFloat(b))
	}
	cum += counts[len(bounds)]
	w.Sample(name+"_bucket", float64(cum), "le", "+Inf")
	w.Sample(name+"_sum", sum)
	w.Sample(name+"_count", float64(cum))
}

// Histogram writes the current state of h.
func (w *Writer) Histogram(name, help string, h *Histogram) {
	counts, sum := h.Snapshot()
	w.HistogramFrom(name, help, h.Bounds, counts, sum)
}

// ProcessCPU writes process_cpu_seconds_total (user+sys from getrusage).
func (w *Writer) ProcessCPU() {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return
	}
	secs := float64(ru.Utime.Sec) + float64(ru.Utime.Usec)/1e6 +
		float64(ru.Stime.Sec) + float64(ru.Stime.Usec)/1e6
	w.Counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", secs)
}

// Bytes returns the exposition written so far.
func (w *Writer) Bytes() []byte { return w.b.Bytes() }

// Respond sends the exposition as an HTTP response with the format's Content-Type.
func (w *Writer) Respond(rw http.ResponseWriter) {
	rw.Header().Set("Content-Type", ContentType)
	_, _ = rw.Write(w.b.Bytes())
}
