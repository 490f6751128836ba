# Two commands on a fresh machine: `make demo` and `make test`. Both create/refresh .venv first.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
MACCO := $(VENV)/bin/macco
DEPS_STAMP := $(VENV)/.deps-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export PREFECT_HOME ?= $(CURDIR)/.prefect
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 120
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo demo-full demo-siglip test test-fast bench scale scale-dask docs gpu-wheels install server worker deploy clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first: the pinned CUDA wheels lie on this machine's disk (see README "Installation").
$(VENV)/.torch: | $(PY)
	$(PIP) install -q torch==2.14.1 torchvision==0.29.1
	touch $@

$(DEPS_STAMP): pyproject.toml $(VENV)/.torch
	$(PIP) install -q -e '.[dev,sng,dask]'
	rm -f $(VENV)/.deps-*
	touch $@

install: $(DEPS_STAMP)

demo: $(DEPS_STAMP)
	$(MACCO) run --config configs/demo.yaml

demo-full: $(DEPS_STAMP)
	$(MACCO) run --config configs/demo-full.yaml

demo-siglip: $(DEPS_STAMP)
	$(MACCO) run --config configs/demo-siglip.yaml

test: $(DEPS_STAMP)
	$(PY) -m pytest -q

test-fast: $(DEPS_STAMP)
	$(PY) -m pytest -q -m "not e2e"

bench: $(DEPS_STAMP)
	$(PY) bench/run_all.py

# The preprocessing DAG at COCO 2014's size and below (bench/scale.py; hours on 2 cores, ~10 GB of disk under
# artifacts-scale/): per stage wall time, peak memory, rows, disk -> bench/scale.json and bench/scale.png
scale: $(DEPS_STAMP)
	nice -n 5 $(PY) bench/scale.py --captions 1000 10000 100000 616767
	$(PY) bench/scale.py --plot bench/scale.json bench/scale.png

# parse and ground on Dask: Prefect's threads, a LocalCluster of 1 and 2 workers, a scheduler reached by address
scale-dask: $(DEPS_STAMP)
	nice -n 5 $(PY) bench/dask_shards.py --captions 50000

# The documentation site (mkdocs.yml, docs/): strict, so a broken link or anchor fails; docs/cli.md is generated.
docs: $(DEPS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# What the GPU run carries (bench/gpu/README.md): the py3.12 manylinux wheels of bench/gpu/wheels.txt and the
# e2e section's prepared world, into bench/gpu/.carry (ignored). On the lent machine: bash bench/gpu/run.sh
gpu-wheels: $(DEPS_STAMP)
	$(PY) bench/gpu/prepare.py --dest bench/gpu/.carry

server: $(DEPS_STAMP)
	$(VENV)/bin/prefect server start --host 127.0.0.1 --port 4200 --analytics-off

# the deployment verbs need a server at PREFECT_API_URL: missing or unreachable is one line, exit 2 (flows/worker.py)
# the process worker of the pool macco-local (prefect worker start --pool macco-local), stopped by the first SIGTERM
worker: $(DEPS_STAMP)
	@$(PY) -m flows.worker --pool macco-local

# prefect.yaml's deployments (full, parse, ground, masks, validate, train, evaluate, reevaluate) on that server
deploy: $(DEPS_STAMP)
	@$(PY) -m flows.worker --check deploy && $(VENV)/bin/prefect --no-prompt deploy --all

clean:
	rm -rf artifacts .prefect
