package main

import (
	"reflect"
	"testing"
)

func TestCPUStatPaths(t *testing.T) {
	v2 := cpuStatPaths("0::/autotune-demo-1/service\n")
	if !reflect.DeepEqual(v2, []string{"/sys/fs/cgroup/autotune-demo-1/service/cpu.stat"}) {
		t.Fatalf("v2: %v", v2)
	}
	v1 := cpuStatPaths("12:cpu,cpuacct:/autotune-demo-1/service\n3:memory:/x\n")
	want := []string{"/sys/fs/cgroup/cpu,cpuacct/autotune-demo-1/service/cpu.stat",
		"/sys/fs/cgroup/cpu/autotune-demo-1/service/cpu.stat"}
	if !reflect.DeepEqual(v1, want) {
		t.Fatalf("v1: %v", v1)
	}
}

func TestParseCPUStat(t *testing.T) {
	v2, ok := parseCPUStat("usage_usec 100\nnr_periods 40\nnr_throttled 12\nthrottled_usec 250000\n")
	if !ok || v2.periods != 40 || v2.throttled != 12 || v2.throttledSeconds != 0.25 {
		t.Fatalf("v2: %+v %v", v2, ok)
	}
	v1, ok := parseCPUStat("nr_periods 7\nnr_throttled 3\nthrottled_time 1500000000\n")
	if !ok || v1.periods != 7 || v1.throttled != 3 || v1.throttledSeconds != 1.5 {
		t.Fatalf("v1: %+v %v", v1, ok)
	}
	if _, ok := parseCPUStat("usage_usec 100\n"); ok {
		t.Fatal("no CFS bandwidth: must not report")
	}
}
