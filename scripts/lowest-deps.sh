#!/usr/bin/env bash
# A venv with autotune's direct dependencies at exactly the lower bounds in pyproject.toml, so
# CI proves those bounds true: an untested bound drifts into a lie ("kubernetes>=30" was one;
# the code needs 37.0.0). Then run the tests with VENV/bin/python -m pytest ...
# Usage: scripts/lowest-deps.sh [VENV]   (default .venv-lowest; needs python3 with venv and pip)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-lowest}
extras="report postgres"   # the extras the tests import: matplotlib, scipy, psycopg2
export PIP_DISABLE_PIP_VERSION_CHECK=1

# Always fresh: packages left from an earlier run could hide a pin that no longer installs.
"${PYTHON:-python3}" -m venv --clear "$venv"
py=$venv/bin/python
"$py" -m pip install -q --upgrade pip

# The pins are derived from pyproject.toml on every run, never copied, so they cannot drift.
"$py" scripts/lowest_pins.py $extras > "$venv/lowest-pins.txt"
# The test tools are the [dev] extra (so a test dependency added there is picked up here),
# unpinned but in the same resolve: pip picks their newest release that accepts the pins (e.g.
# a kubernetes-validate that works with the lowest jsonschema). Transitive dependencies are
# left to pip (newest allowed), as a user's fresh install gets them.
"$py" scripts/lowest_pins.py --tools dev > "$venv/test-tools.txt"
"$py" -m pip install -q -r "$venv/lowest-pins.txt" -r "$venv/test-tools.txt"
# autotune itself without dependencies: its own resolve must not move any pin.
"$py" -m pip install -q --no-deps -e .

# Print the direct dependencies as installed; fail unless each is exactly its lower bound.
"$py" -m pip freeze | "$py" scripts/lowest_pins.py --check $extras
