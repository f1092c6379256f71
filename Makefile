# clustersim: `make demo` and `make test` set up everything on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEMO   ?= scenarios/network/oversubscribed_shuffle.yaml

.PHONY: demo test lint bench install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/clustersim run $(DEMO) -o reports/demo

lint: $(STAMP)
	$(VENV)/bin/ruff check clustersim tests bench
	$(VENV)/bin/ruff format --check clustersim tests bench

test: $(STAMP) lint
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) bench/bench_engine.py
	$(PY) bench/bench_contention.py
	$(PY) bench/bench_rate_solver.py
	$(PY) bench/bench_allreduce.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
