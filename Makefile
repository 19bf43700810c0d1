# gridloop: the two commands in the README are `make demo` and `make test`.
# Everything is built and cached outside the repository (see docs/local-cluster.md).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup build demo down test test-unit lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

# builds etcd, kube-*, kubectl, kwok and helm from Go modules, once per version
build: setup
	$(BIN)/gridloop local build

# start the local cluster with the default simulated GPU fleet, install the bundle on it
# (KAITO and the DCGM exporter cannot be downloaded here: left out), and
# show the fleet, its queues and the health service's work once (`gridloop status` is the
# live view)
demo: build
	$(BIN)/gridloop local up
	$(BIN)/gridloop bundle --skip kaito --skip dcgm-exporter
	$(BIN)/gridloop install --profile local --wait
	$(BIN)/gridloop status --once --all

down: setup
	$(BIN)/gridloop local down

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# unit tests and cluster tests (the latter start their own local cluster)
test: lint build
	$(BIN)/pytest

test-unit: setup
	$(BIN)/pytest -m "not cluster"

bench: build
	$(BIN)/python bench/bench_local_up.py
	$(BIN)/python bench/bench_health.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
