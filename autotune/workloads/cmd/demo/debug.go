package main

import (
	"net/http"
	"net/http/pprof"
)

// debugPprofEnv turns on the net/http/pprof handlers (CPU profile, execution
// trace, heap, goroutines, ...) under /debug/pprof/ on the service's own
// listener. Off by default: a trial measures the service exactly as it runs
// in production, and a profile or trace in flight costs CPU the trial would
// count. The listener is loopback-only, so turning it on exposes nothing.
const debugPprofEnv = "DEBUG_PPROF"

// registerPprof mounts net/http/pprof on mux. Importing the package also
// registers it on http.DefaultServeMux, which this service never serves; the
// handlers are mounted explicitly because the service uses its own mux.
func registerPprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index) // named profiles: heap, goroutine, ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
