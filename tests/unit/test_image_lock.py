"""The image is reproducible (issue 18): deploy/requirements.lock pins, with hashes, every Python
package pyproject.toml gives the image (its dependencies, the image's extras, the build backend)
at a version pyproject.toml allows, and deploy/Dockerfile installs only that lock from base
images of exact versions. Nothing here builds the image (no docker on the test machines): a
stale lock or a loose FROM fails here instead of drifting silently."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "deploy" / "requirements.lock"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
IMAGE_EXTRAS = {"postgres", "report"}
"""What deploy/Dockerfile says the image ships (not gp: torch is too large for it)."""

HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Pin:
    version: Version
    hashes: tuple[str, ...]


@dataclass(frozen=True)
class Lock:
    pins: dict[NormalizedName, Pin]
    header: dict[str, str]
    """The ``# key: value`` lines scripts/lock-image-deps.sh writes first."""
    options: list[str]


def _lock() -> Lock:
    text = LOCK.read_text()
    header = {m.group(1): m.group(2)
              for m in re.finditer(r"^# (extras|python|uv): (.*)$", text, re.M)}
    pins: dict[NormalizedName, Pin] = {}
    options: list[str] = []
    # One requirement per logical line: continuation lines joined, comments dropped.
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("--"):
            options.append(line)
            continue
        spec, _, rest = line.partition(" --hash")
        req = Requirement(spec)
        [pinned] = list(req.specifier)
        assert pinned.operator == "==", f"{line[:60]}: not pinned to one version"
        pins[canonicalize_name(req.name)] = Pin(Version(pinned.version),
                                                tuple(HASH.findall("--hash" + rest)))
    return Lock(pins, header, options)


def _image_python() -> str:
    """The Python minor version of the Dockerfile's python base images (the same in every
    stage: the last copies the build stage's virtualenv)."""
    tags = {str(t) for t in re.findall(r"^FROM python:(\d+\.\d+)\.\d+-", DOCKERFILE.read_text(),
                                       re.M)}
    assert len(tags) == 1, f"one Python for every stage, found {tags or 'none'}"
    return tags.pop()


def _image_requirements() -> list[Requirement]:
    """What pyproject.toml gives the image, for the image's Python on Linux."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    reqs = [Requirement(r) for r in project["project"]["dependencies"]]
    reqs += [Requirement(r) for extra in sorted(IMAGE_EXTRAS) for r in extras[extra]]
    reqs += [Requirement(r) for r in project["build-system"]["requires"]]
    env = {"python_version": _image_python(), "python_full_version": f"{_image_python()}.0",
           "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
           "platform_machine": "x86_64", "implementation_name": "cpython",
           "platform_python_implementation": "CPython"}
    return [r for r in reqs
            if r.marker is None or any(r.marker.evaluate({**env, "extra": e})
                                       for e in ("", *IMAGE_EXTRAS))]


def test_the_lock_was_made_for_the_images_extras_and_python() -> None:
    lock = _lock()
    assert set(lock.header["extras"].split()) == IMAGE_EXTRAS, (
        "deploy/requirements.lock was made for other extras: scripts/lock-image-deps.sh")
    assert lock.header["python"].split()[0] == _image_python(), (
        "the lock's Python is not the image's: scripts/lock-image-deps.sh")
    # No build in the slim image (no compiler there), and what pip installs is what was hashed.
    assert "--only-binary :all:" in lock.options


@pytest.mark.parametrize("req", _image_requirements(), ids=str)
def test_every_requirement_of_the_image_is_pinned_with_hashes_within_its_range(
        req: Requirement) -> None:
    pins = _lock().pins
    name = canonicalize_name(req.name)
    assert name in pins, (f"{req} (pyproject.toml) is not in deploy/requirements.lock: run "
                          "scripts/lock-image-deps.sh")
    pin = pins[name]
    assert req.specifier.contains(pin.version, prereleases=True), (
        f"deploy/requirements.lock pins {name}=={pin.version}, outside pyproject.toml's "
        f"{req}: run scripts/lock-image-deps.sh")
    assert pin.hashes, f"{name} has no hash"


def test_every_pin_of_the_lock_has_hashes() -> None:
    """pip --require-hashes refuses a lock with one unhashed line; the transitive packages are
    pinned too (their versions are the resolver's, checked by pip in the image build)."""
    pins = _lock().pins
    assert len(pins) > len(_image_requirements())
    assert not [name for name, pin in pins.items() if not pin.hashes]
    assert "autotune" not in pins, "the project itself is installed with --no-deps, not locked"


def test_the_dockerfile_installs_only_the_lock() -> None:
    text = DOCKERFILE.read_text()
    copied = re.search(r"^COPY deploy/requirements\.lock (\S+)$", text, re.M)
    assert copied, "the Dockerfile copies the lock"
    assert re.search(rf"pip install .*--require-hashes -r {re.escape(copied.group(1))}$",
                     text, re.M)
    # The project last, with nothing resolved: --no-deps, and its build backend from the lock.
    assert re.search(r"pip install .*--no-deps --no-build-isolation \.$", text, re.M)
    assert not re.search(r"pip (install|wheel) [^\n]*\.\[", text), "no extras resolved by pip"


def test_every_base_image_has_an_exact_version() -> None:
    froms = re.findall(r"^FROM (\S+)", DOCKERFILE.read_text(), re.M)
    assert froms
    for image in froms:
        name, _, tag = image.partition(":")
        assert re.match(r"\d+\.\d+\.\d+(-[a-z0-9-]+)?(@sha256:[0-9a-f]{64})?$", tag), (
            f"FROM {image}: the base image needs an exact version (major.minor.patch)")
        assert name in ("python", "golang"), f"FROM {image}: an unexpected base image"


def test_the_go_image_builds_the_load_generators_module() -> None:
    """golang:<x.y.z> at least autotune/workloads/go.mod's go line: the official image sets
    GOTOOLCHAIN=local, so an older one fails instead of downloading a newer toolchain."""
    [tag] = re.findall(r"^FROM golang:(\d+\.\d+\.\d+)", DOCKERFILE.read_text(), re.M)
    wanted = re.search(r"^go (\S+)$", (ROOT / "autotune/workloads/go.mod").read_text(), re.M)
    assert wanted and Version(tag) >= Version(wanted.group(1))
