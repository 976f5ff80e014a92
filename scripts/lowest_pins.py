"""Pins for the lowest-dependencies CI step, read from pyproject.toml (used by lowest-deps.sh).

    lowest_pins.py EXTRA...          print "name==lower-bound" for [project] dependencies + extras
    lowest_pins.py --tools EXTRA     print that extra's requirements as written (unpinned)
    pip freeze | lowest_pins.py --check EXTRA...
                                     print those packages' installed versions; exit 1 unless
                                     each one is exactly its lower bound

Standard library only (tomllib): it runs before anything is installed. Each requirement must
have a ">=" (or "==") bound written as a full release version ("6.0.3", not "6"), so that the
pin names a version that exists and the check compares like with like.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([^;]*)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lower_bounds(extras: list[str]) -> dict[str, str]:
    """Canonical name -> lower bound, for [project] dependencies and the given extras."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    bounds: dict[str, str] = {}
    for requirement in requirements:
        match = REQUIREMENT.match(requirement)
        assert match, requirement
        name, specifiers = canonical(match[1]), match[2]
        found = re.search(r"(?:>=|==)\s*([0-9][0-9A-Za-z.]*)", specifiers)
        if found is None:
            sys.exit(f"lowest_pins: {requirement!r} has no lower bound (>= or ==) to pin")
        if bounds.setdefault(name, found[1]) != found[1]:
            sys.exit(f"lowest_pins: {name} has two lower bounds: {bounds[name]}, {found[1]}")
    return bounds


def check(bounds: dict[str, str], freeze: str) -> int:
    installed = {}
    for line in freeze.splitlines():
        name, sep, version = line.partition("==")
        if sep and canonical(name) in bounds:
            installed[canonical(name)] = version.strip()
            print(line)
    wrong = [f"{name}: installed {installed.get(name, 'nothing')}, lower bound {bound}"
             for name, bound in sorted(bounds.items()) if installed.get(name) != bound]
    for line in wrong:
        print(f"NOT AT ITS LOWER BOUND: {line}", file=sys.stderr)
    return 1 if wrong else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--check"]:
        return check(lower_bounds(argv[1:]), sys.stdin.read())
    if argv[:1] == ["--tools"]:
        project = tomllib.loads(PYPROJECT.read_text())["project"]
        print("\n".join(project["optional-dependencies"][argv[1]]))
        return 0
    for name, bound in lower_bounds(argv).items():
        print(f"{name}=={bound}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
