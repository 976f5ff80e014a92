package main

// Re-exposes a curated set of runtime/metrics samples under the exact names that
// prometheus/client_golang's Go collector uses (go_<path with _>_<unit>[_total]),
// plus the legacy client_golang metrics (go_goroutines, go_info,
// go_gc_duration_seconds, process_cpu_seconds_total).

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sort"
	"strings"
	"time"

	"autotune/workloads/internal/prom"
)

// Scalar runtime metrics to export (counters when cumulative, gauges otherwise).
var runtimeScalarNames = []string{
	"/cpu/classes/idle:cpu-seconds",
	"/cpu/classes/total:cpu-seconds",
	"/cpu/classes/user:cpu-seconds",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/gc/mark/assist:cpu-seconds",
	"/cpu/classes/gc/mark/dedicated:cpu-seconds",
	"/cpu/classes/gc/mark/idle:cpu-seconds",
	"/cpu/classes/gc/pause:cpu-seconds",
	"/cpu/classes/scavenge/total:cpu-seconds",
	"/sched/gomaxprocs:threads",
	"/sched/goroutines:goroutines",
	// Go >= 1.26: goroutines by state; runnable is what the overflow detector reads without
	// schedtrace (skipped on older Go versions)
	"/sched/goroutines/runnable:goroutines",
	"/sched/goroutines/running:goroutines",
	"/sched/goroutines/waiting:goroutines",
	"/gc/cycles/total:gc-cycles",
	"/gc/cycles/forced:gc-cycles",
	"/gc/cycles/automatic:gc-cycles",
	"/gc/gogc:percent",
	"/gc/gomemlimit:bytes",
	"/gc/heap/goal:bytes",
	"/gc/heap/live:bytes",
	"/gc/heap/allocs:bytes",
	"/gc/heap/allocs:objects",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/total:bytes",
	"/sync/mutex/wait/total:seconds",
}

// Histogram runtime metrics to export, re-bucketed onto runtimeHistBounds.
var runtimeHistNames = []string{
	"/sched/pauses/total/gc:seconds",
	"/sched/pauses/stopping/gc:seconds",
	"/sched/latencies:seconds",
}

// 1us .. 10s, R10 series (~1.26x per bucket), 71 bounds.
var runtimeHistBounds = prom.RenardBounds(-6, 1)

type runtimeMetric struct {
	promName   string
	help       string
	kind       metrics.ValueKind
	cumulative bool
}

type runtimeCollector struct {
	samples []metrics.Sample
	info    []runtimeMetric
}

// promNameFor mirrors client_golang's internal.RuntimeMetricsToProm.
func promNameFor(d metrics.Description) string {
	key, unit, _ := strings.Cut(d.Name, ":")
	key = strings.TrimPrefix(key, "/")
	name := "go_" + strings.ReplaceAll(key, "/", "_") + "_" + unit
	name = strings.NewReplacer("-", "_", "*", "_").Replace(name)
	if d.Cumulative && d.Kind != metrics.KindFloat64Histogram {
		name += "_total"
	}
	return name
}

func newRuntimeCollector() *runtimeCollector {
	all := map[string]metrics.Description{}
	for _, d := range metrics.All() {
		all[d.Name] = d
	}
	c := &runtimeCollector{}
	add := func(name string, wantHist bool) {
		d, ok := all[name]
		if !ok {
			return // not supported by this Go version: skip gracefully
		}
		isHist := d.Kind == metrics.KindFloat64Histogram
		if isHist != wantHist {
			return
		}
		c.samples = append(c.samples, metrics.Sample{Name: name})
		c.info = append(c.info, runtimeMetric{
			promName:   promNameFor(d),
			help:       d.Description + " Sourced from " + d.Name + ".",
			kind:       d.Kind,
			cumulative: d.Cumulative,
		})
	}
	for _, n := range runtimeScalarNames {
		add(n, false)
	}
	for _, n := range runtimeHistNames {
		add(n, true)
	}
	return c
}

// mergeRuntimeHistogram folds a runtime Float64Histogram (Buckets has
// len(Counts)+1 boundaries, bucket i is [Buckets[i], Buckets[i+1]), the first
// boundary may be -Inf and the last +Inf) onto fixed upper bounds. Each runtime
// bucket is assigned to the smallest fixed bound >= its upper edge, so every
// cumulative count is exact for "value <= le" (it may only under-count
// observations that lie in a runtime bucket straddling le; runtime buckets are
// much finer than ours). Runtime histograms carry no sum, so the returned sum
// is APPROXIMATED from bucket midpoints (lower edge for the +Inf bucket).
func mergeRuntimeHistogram(h *metrics.Float64Histogram, bounds []float64) ([]uint64, float64) {
	counts := make([]uint64, len(bounds)+1)
	var sum float64
	for i, c := range h.Counts {
		if c == 0 {
			continue
		}
		lo, hi := h.Buckets[i], h.Buckets[i+1]
		j := len(bounds)
		if !math.IsInf(hi, 1) {
			j = sort.SearchFloat64s(bounds, hi)
		}
		counts[j] += c
		var mid float64
		switch {
		case math.IsInf(lo, -1) && math.IsInf(hi, 1):
			mid = 0
		case math.IsInf(lo, -1):
			mid = math.Min(hi, 0)
		case math.IsInf(hi, 1):
			mid = lo
		default:
			mid = (lo + hi) / 2
		}
		sum += mid * float64(c)
	}
	return counts, sum
}

func (c *runtimeCollector) write(w *prom.Writer) {
	metrics.Read(c.samples)
	for i, s := range c.samples {
		m := c.info[i]
		switch s.Value.Kind() {
		case metrics.KindUint64:
			c.writeScalar(w, m, float64(s.Value.Uint64()))
		case metrics.KindFloat64:
			c.writeScalar(w, m, s.Value.Float64())
		case metrics.KindFloat64Histogram:
			counts, sum := mergeRuntimeHistogram(s.Value.Float64Histogram(), runtimeHistBounds)
			w.HistogramFrom(m.promName, m.help, runtimeHistBounds, counts, sum)
		default: // KindBad: metric vanished; skip
		}
	}

	w.Gauge("go_goroutines", "Number of goroutines that currently exist.", float64(runtime.NumGoroutine()))

	w.Header("go_info", "gauge", "Information about the Go environment.")
	w.Sample("go_info", 1, "version", runtime.Version())

	// Legacy client_golang summary, from the last (up to 256) GC pauses.
	var st debug.GCStats
	st.PauseQuantiles = make([]time.Duration, 5) // min, 25%, 50%, 75%, max
	debug.ReadGCStats(&st)
	w.Header("go_gc_duration_seconds", "summary", "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.")
	for i, q := range []string{"0", "0.25", "0.5", "0.75", "1"} {
		w.Sample("go_gc_duration_seconds", st.PauseQuantiles[i].Seconds(), "quantile", q)
	}
	w.Sample("go_gc_duration_seconds_sum", st.PauseTotal.Seconds())
	w.Sample("go_gc_duration_seconds_count", float64(st.NumGC))

	w.ProcessCPU()
}

func (c *runtimeCollector) writeScalar(w *prom.Writer, m runtimeMetric, v float64) {
	if m.cumulative {
		w.Counter(m.promName, m.help, v)
	} else {
		w.Gauge(m.promName, m.help, v)
	}
}
