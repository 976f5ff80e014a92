package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"autotune/workloads/internal/prom"
)

// CFS throttling of the cgroup the service runs in, under the names cAdvisor gives it in a
// cluster (container_cpu_cfs_*), so one PromQL query reads throttling on both platforms.
// autotune's local stack puts the CPU quota on the service's own cgroup, as a container's
// limit is on the container's cgroup. Unreadable (no cgroup, no cpu controller): not exported,
// never zero.

type cfsStat struct {
	periods, throttled uint64
	throttledSeconds   float64
}

// cpuStatPaths lists where this process's cpu.stat may be: cgroup v2's unified hierarchy,
// then v1's cpu controller under its usual mount points.
func cpuStatPaths(procSelfCgroup string) []string {
	var paths []string
	for _, line := range strings.Split(strings.TrimSpace(procSelfCgroup), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		controllers, path := parts[1], parts[2]
		if parts[0] == "0" && controllers == "" {
			paths = append(paths, filepath.Join("/sys/fs/cgroup", path, "cpu.stat"))
			continue
		}
		for _, c := range strings.Split(controllers, ",") {
			if c == "cpu" {
				paths = append(paths,
					filepath.Join("/sys/fs/cgroup", controllers, path, "cpu.stat"),
					filepath.Join("/sys/fs/cgroup/cpu", path, "cpu.stat"))
			}
		}
	}
	return paths
}

// parseCPUStat reads nr_periods, nr_throttled and the throttled time (v2 throttled_usec,
// v1 throttled_time in ns); ok is false when the periods are missing (no CFS bandwidth).
func parseCPUStat(text string) (cfsStat, bool) {
	var s cfsStat
	seen := false
	for _, line := range strings.Split(text, "\n") {
		fields := strings.Fields(line)
		if len(fields) != 2 {
			continue
		}
		v, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "nr_periods":
			s.periods, seen = v, true
		case "nr_throttled":
			s.throttled = v
		case "throttled_usec":
			s.throttledSeconds = float64(v) / 1e6
		case "throttled_time":
			s.throttledSeconds = float64(v) / 1e9
		}
	}
	return s, seen
}

func readCFS() (cfsStat, bool) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return cfsStat{}, false
	}
	for _, path := range cpuStatPaths(string(own)) {
		text, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if s, ok := parseCPUStat(string(text)); ok {
			return s, true
		}
	}
	return cfsStat{}, false
}

func writeCFS(pw *prom.Writer) {
	s, ok := readCFS()
	if !ok {
		return
	}
	pw.Counter("container_cpu_cfs_periods_total",
		"Number of elapsed CFS enforcement periods of the service's cgroup (cpu.stat nr_periods).",
		float64(s.periods))
	pw.Counter("container_cpu_cfs_throttled_periods_total",
		"Number of throttled CFS periods of the service's cgroup (cpu.stat nr_throttled).",
		float64(s.throttled))
	pw.Counter("container_cpu_cfs_throttled_seconds_total",
		"Total time the service's cgroup was throttled (cpu.stat throttled_usec/throttled_time).",
		s.throttledSeconds)
}
