# gwms-obs — `make run` and `make test` are the two commands a newcomer needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Downloads and builds are cached here, versioned so a layout change starts clean.
CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gwms-obs/v1
SAMPLE ?= build/sample-factory
SAMPLE_PILOTS ?= 3000
LISTEN ?= 127.0.0.1:9822
export PIP_CACHE_DIR := $(CACHE_DIR)/pip
# Go builds (our otelcol distribution, Jaeger, dashboard-linter): module and
# build caches under the versioned cache dir, binaries named by version in
# $(TOOLS_BIN) so a pin change rebuilds and nothing else does.
export GOMODCACHE := $(CACHE_DIR)/go/mod
export GOCACHE := $(CACHE_DIR)/go/build
export GOFLAGS := -buildvcs=false -modcacherw
TOOLS_BIN := $(CACHE_DIR)/bin

.PHONY: help venv run sample test check lint typecheck unit live bench generate clean
help:
	@echo "make run    - simulate a factory, print its accounting, serve /metrics on $(LISTEN) until Ctrl-C"
	@echo "make test   - everything CI runs (lint, types, unit, live tests against real Prometheus)"
	@echo "make check  - the fast inner loop: lint, types, unit tests without live servers"
	@echo "make bench  - ingest benchmarks (writes benchmarks/results/)"

$(BIN)/.stamp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
	$(BIN)/pip install -q -e '.[dev]' 2>&1 | grep -v "is ignored" || true
	$(BIN)/python -c "import gwms_obs, prometheus_client, opentelemetry.sdk, hypothesis"
	touch $@
venv: $(BIN)/.stamp

$(SAMPLE)/.done: $(BIN)/.stamp
	rm -rf $(SAMPLE)
	$(BIN)/gwms-obs simulate --out $(SAMPLE) --pilots $(SAMPLE_PILOTS) --seed 1
	touch $@
sample: $(SAMPLE)/.done

run: sample
	$(BIN)/gwms-obs report --factory-dir $(SAMPLE) --format table --plot build/sample-accounting.png
	@echo "accounting plot: build/sample-accounting.png"
	@echo "serving http://$(LISTEN)/metrics - Ctrl-C to stop"
	$(BIN)/gwms-obs export --factory-dir $(SAMPLE) --listen $(LISTEN) --checkpoint build/sample-checkpoint.json --interval 30

lint: venv
	$(BIN)/ruff check exporters tests benchmarks
	$(BIN)/ruff format --check exporters tests benchmarks

typecheck: venv
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest -q -m "not live" -p no:cacheprovider

live: venv
	$(BIN)/pytest -q -m live -p no:cacheprovider -rs

check: lint typecheck unit

test: lint typecheck
	$(BIN)/pytest -q -p no:cacheprovider -rs

generate: venv
	$(BIN)/python -m gwms_obs.generate

bench: venv
	$(BIN)/python benchmarks/ingest.py

clean:
	rm -rf build $(VENV)
