# gridloop: the two commands in the README are `make demo` and `make test`.
# Everything is built and cached outside the repository (see docs/local-cluster.md).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup host-packages build demo down test test-unit lint bench clean

# Debian packages the local cluster's container nodes need on the host: buildah builds
# their images, debootstrap the base of gridloop's image, iptables carries kube-proxy's
# rules, tmux is the terminal test_status_terminal drives; installed with apt-get when
# missing and running as root
HOST_PACKAGES := buildah debootstrap iptables tmux

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

host-packages:
	@missing=""; for p in $(HOST_PACKAGES); do command -v $$p >/dev/null || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	  else echo "error: the local cluster needs:$$missing (sudo apt-get install$$missing)" >&2; exit 2; fi; \
	fi

# builds etcd, kube-*, kubectl, kwok, helm, containerd, gVisor and the rest from Go
# modules (and unpacks runc, the CNI plugins and busybox from Debian), once per version
build: setup host-packages
	$(BIN)/gridloop local build

# start the local cluster with the default simulated GPU fleet, install the bundle on it
# (KAITO cannot be downloaded here: left out), show the chart's
# controllers and health service running as real pods on the container node, run the
# example agent in a gVisor sandbox from the warm pool (examples/sandboxes/agent.py), and
# show the fleet, its queues and the health service's work once (`gridloop status` is the
# live view). `local up` builds what the cluster runs and nothing else: Helm 3 and the
# Trivy scanner are test tools, built by `make build` and `make test`.
demo: setup host-packages
	$(BIN)/gridloop local up
	$(BIN)/gridloop bundle --skip kaito
	$(BIN)/gridloop install --profile local --wait
	@eval "$$($(BIN)/gridloop local env)" && \
	  kubectl get pods -A -o wide --field-selector spec.nodeName=system-000
	@eval "$$($(BIN)/gridloop local env)" && \
	  $(BIN)/python examples/sandboxes/agent.py --namespace agents --warm-pool default
	$(BIN)/gridloop status --once --all

down: setup
	$(BIN)/gridloop local down

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# every test: unit tests, those that run the built binaries, and cluster tests (the latter
# start their own local cluster). The inference, loop and training tests run the heavy
# images (vLLM CPU, Ray, the trainer), which only this target builds (`make demo` does
# not): tests/suite.py builds them beside the tests, which run them last, so a cold run is
# not longer by their minutes. It runs the build and pytest, and ends with one line:
# passed, failed, and where the time went.
test: lint setup host-packages
	$(BIN)/python tests/suite.py --durations=30

# what runs on a fresh clone with no build: not the cluster tests, nor the tests that run
# the built helm, helm3, kubectl, trivy-k8s-config or promtool (marked needs_binaries)
test-unit: setup
	$(BIN)/pytest -m "not cluster and not needs_binaries"

bench: build
	$(BIN)/python bench/bench_local_up.py
	$(BIN)/python bench/bench_health.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache .grimp_cache
