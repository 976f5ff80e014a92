package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"autotune/workloads/internal/blockedp"
)

// chaosEnv turns on /debug/chaos/blocked-p: goroutines of this service that
// hold their Ps (package blockedp), which autotune's blocked_p scenario
// injects and removes around a measurement window. Off by default; the
// listener is loopback-only, and every request must carry the header
// X-Autotune-Chaos: 1: a web page cannot send a custom header to another
// origin without a CORS preflight, which this service never answers, so a
// browser on the machine cannot hold the service's Ps.
//
//	POST   /debug/chaos/blocked-p?goroutines=N&hold=50ms&gap=50ms&for=40s
//	GET    /debug/chaos/blocked-p   {"goroutines", "holding", "held_seconds"}
//	DELETE /debug/chaos/blocked-p   returns once every holder has exited
const chaosEnv = "DEMO_CHAOS"

func registerChaos(mux *http.ServeMux, h *blockedp.Holder) {
	guard := func(next http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Autotune-Chaos") != "1" {
				http.Error(w, "missing X-Autotune-Chaos: 1", http.StatusForbidden)
				return
			}
			next(w, r)
		}
	}
	status := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(h.Status())
	}
	mux.HandleFunc("GET /debug/chaos/blocked-p", guard(func(w http.ResponseWriter, r *http.Request) {
		status(w)
	}))
	mux.HandleFunc("DELETE /debug/chaos/blocked-p", guard(func(w http.ResponseWriter, r *http.Request) {
		h.Stop()
		status(w)
	}))
	mux.HandleFunc("POST /debug/chaos/blocked-p", guard(func(w http.ResponseWriter, r *http.Request) {
		spec, err := parseSpec(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := h.Start(spec); err != nil {
			code := http.StatusBadRequest
			if errors.Is(err, blockedp.ErrActive) {
				code = http.StatusConflict
			}
			http.Error(w, err.Error(), code)
			return
		}
		status(w)
	}))
}

func parseSpec(r *http.Request) (blockedp.Spec, error) {
	q := r.URL.Query()
	var s blockedp.Spec
	n, err := strconv.Atoi(q.Get("goroutines"))
	if err != nil || n < 1 || n > 64 {
		return s, fmt.Errorf("goroutines=%q: want 1..64", q.Get("goroutines"))
	}
	s.Goroutines = n
	for _, f := range []struct {
		name string
		dst  *time.Duration
		max  time.Duration
	}{{"hold", &s.Hold, time.Minute}, {"gap", &s.Gap, time.Minute}, {"for", &s.For, time.Hour}} {
		d, err := time.ParseDuration(q.Get(f.name))
		if err != nil || d < 0 || d > f.max {
			return s, fmt.Errorf("%s=%q: want a Go duration, 0..%v", f.name, q.Get(f.name), f.max)
		}
		*f.dst = d
	}
	return s, nil
}
