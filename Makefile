# The two commands a newcomer needs: `make demo` (the local study) and `make test`.
VENV   ?= .venv
PYTHON ?= python3
BIN     = $(VENV)/bin

.PHONY: demo setup tools test lint clean

demo: setup tools
	$(BIN)/autotune doctor
	$(BIN)/autotune run experiments/local.yaml

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[local,report,dev]'
	touch $@

tools:
	scripts/ensure-tools.sh

test: setup tools
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check autotune tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
