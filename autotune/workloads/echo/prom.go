package main

// Hand-written Prometheus text exposition (format 0.0.4), standard library only.
// This file is deliberately self-contained; loadgen and echo carry their own copy
// because every workload is a separate module with no shared dependencies.

import (
	"bytes"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

const promContentType = "text/plain; version=0.0.4; charset=utf-8"

// renardBounds returns histogram upper bounds following the Renard R10 series
// (1, 1.25, 1.6, 2, 2.5, 3.15, 4, 5, 6.3, 8 per decade, i.e. ~1.26x per step)
// from 10^minExp up to and including 10^maxExp. Bounds are parsed from decimal
// strings, so the `le` labels print as short exact decimals ("0.00016").
func renardBounds(minExp, maxExp int) []float64 {
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

// histogram is a lock-free fixed-bucket histogram of durations.
type histogram struct {
	bounds   []float64       // ascending upper bounds (le), +Inf implicit
	counts   []atomic.Uint64 // non-cumulative; len(bounds)+1, last = overflow (+Inf)
	sumNanos atomic.Int64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

func (h *histogram) observe(d time.Duration) {
	s := d.Seconds()
	// smallest i with bounds[i] >= s, i.e. the first bucket whose le admits s.
	i := sort.SearchFloat64s(h.bounds, s)
	h.counts[i].Add(1)
	h.sumNanos.Add(int64(d))
}

// snapshot returns non-cumulative counts and the sum in seconds.
func (h *histogram) snapshot() ([]uint64, float64) {
	c := make([]uint64, len(h.counts))
	for i := range h.counts {
		c[i] = h.counts[i].Load()
	}
	return c, float64(h.sumNanos.Load()) / 1e9
}

type promWriter struct {
	b bytes.Buffer
}

func formatFloat(v float64) string {
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

func (w *promWriter) header(name, typ, help string) {
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

// sample writes one line; labels is a list of name, value pairs.
func (w *promWriter) sample(name string, v float64, labels ...string) {
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
	w.b.WriteString(formatFloat(v))
	w.b.WriteByte('\n')
}

func (w *promWriter) gauge(name, help string, v float64) {
	w.header(name, "gauge", help)
	w.sample(name, v)
}

func (w *promWriter) counter(name, help string, v float64) {
	w.header(name, "counter", help)
	w.sample(name, v)
}

// histogramFrom writes a histogram given upper bounds, NON-cumulative counts
// (len(bounds)+1, last is the +Inf overflow) and a sum.
func (w *promWriter) histogramFrom(name, help string, bounds []float64, counts []uint64, sum float64) {
	w.header(name, "histogram", help)
	var cum uint64
	for i, b := range bounds {
		cum += counts[i]
		w.sample(name+"_bucket", float64(cum), "le", formatFloat(b))
	}
	cum += counts[len(bounds)]
	w.sample(name+"_bucket", float64(cum), "le", "+Inf")
	w.sample(name+"_sum", sum)
	w.sample(name+"_count", float64(cum))
}

func (w *promWriter) histogram(name, help string, h *histogram) {
	counts, sum := h.snapshot()
	w.histogramFrom(name, help, h.bounds, counts, sum)
}

// writeProcessCPU writes process_cpu_seconds_total (user+sys from getrusage).
func writeProcessCPU(w *promWriter) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return
	}
	secs := float64(ru.Utime.Sec) + float64(ru.Utime.Usec)/1e6 +
		float64(ru.Stime.Sec) + float64(ru.Stime.Usec)/1e6
	w.counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", secs)
}
