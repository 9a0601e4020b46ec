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
# make run's report format (table, csv, json) and extra flags for its export step
RUN_FORMAT ?= table
RUN_ARGS ?=
export PIP_CACHE_DIR := $(CACHE_DIR)/pip
# Go builds (our otelcol distribution, Jaeger, dashboard-linter): module and
# build caches under the versioned cache dir, binaries named by version in
# $(TOOLS_BIN) so a pin change rebuilds and nothing else does.
export GOMODCACHE := $(CACHE_DIR)/go/mod
export GOCACHE := $(CACHE_DIR)/go/build
export GOFLAGS := -buildvcs=false -modcacherw
TOOLS_BIN := $(CACHE_DIR)/bin
# Our collector distribution: the binary's name carries the manifest's hash, so
# an unchanged otel-collector/builder-config.yaml never rebuilds. ocb itself is
# installed at the core version the manifest declares (dist.version).
OTELCOL_MANIFEST := otel-collector/builder-config.yaml
OTELCOL_VERSION := $(shell sed -n 's/^  version: *//p' $(OTELCOL_MANIFEST))
OTELCOL := $(TOOLS_BIN)/otelcol-gwms-$(OTELCOL_VERSION)-$(shell sha256sum $(OTELCOL_MANIFEST) | cut -c1-12)
OCB := $(TOOLS_BIN)/ocb-v$(OTELCOL_VERSION)
# Jaeger v2: its Go module is tagged v1.x alongside each v2.y release
# (v1.76.0 = v2.13.0, 2025-12-03, the newest on the module proxy).
JAEGER_VERSION := v1.76.0
JAEGER_V2 := v2.13.0
JAEGER := $(TOOLS_BIN)/jaeger-$(JAEGER_VERSION)
# the live tests and benchmarks/collector.py find the binaries through these
export GWMS_OBS_OTELCOL := $(OTELCOL)
export GWMS_OBS_JAEGER := $(JAEGER)
# Grafana's dashboard-linter, pinned; tests/test_dashboard_linter.py runs it.
DASHBOARD_LINTER_VERSION := v0.2.0
DASHBOARD_LINTER := $(TOOLS_BIN)/dashboard-linter-$(DASHBOARD_LINTER_VERSION)
export GWMS_OBS_DASHBOARD_LINTER := $(DASHBOARD_LINTER)
# vegeta, the controller benchmark's open-loop HTTP load generator (constant
# rate, coordinated-omission-free latencies), pinned; tools/vegeta.py runs it.
VEGETA_VERSION := v12.13.0
VEGETA := $(TOOLS_BIN)/vegeta-$(VEGETA_VERSION)
export GWMS_OBS_VEGETA := $(VEGETA)
# Thanos (sidecar, query, store gateway, compactor: docs/scale-out.md), pinned. v0.40.1 is the
# newest whose go.mod this Go accepts (v0.42.x wants Go >= 1.26.10).
THANOS_VERSION := v0.40.1
# Built with Prometheus's slicelabels layout, as Thanos's own release builds are: its labelpb casts
# []ZLabel to labels.Labels, which is only sound under that layout (thanos-io/thanos#8947; without
# it the store gateway dies with SIGSEGV on its first sync). The tag is in the binary's name.
THANOS_TAGS := slicelabels
THANOS := $(TOOLS_BIN)/thanos-$(THANOS_VERSION)-$(THANOS_TAGS)
export GWMS_OBS_THANOS := $(THANOS)
# tests/test_deploy_nspawn.py caches its debootstrap rootfs and .debs here
export GWMS_OBS_CACHE_DIR := $(CACHE_DIR)
# The compiled fast path of the readers (native/: Rust through PyO3, see
# exporters/gwms_obs/native.py): one abi3 manylinux_2_28 wheel, linked
# against glibc 2.28 with zig so EL8/EL9 and Debian hosts take the very wheel the
# tests ran. Built by hash of its inputs under the cache dir (a change rebuilds,
# nothing else does); cargo is the machine's Rust toolchain (~/.cargo/bin).
export PATH := $(HOME)/.cargo/bin:$(PATH)
export CARGO_TARGET_DIR := $(CACHE_DIR)/cargo-target
NATIVE_INPUTS := $(sort $(wildcard native/src/*.rs)) native/Cargo.toml native/Cargo.lock native/pyproject.toml
NATIVE_HASH := $(shell cat $(NATIVE_INPUTS) | sha256sum | cut -c1-12)
NATIVE_DIR := $(CACHE_DIR)/native/$(NATIVE_HASH)
NATIVE_STAMP := $(VENV)/.native-$(NATIVE_HASH)
# tools/wheelhouse.py puts this wheel beside the exporter's
export GWMS_OBS_NATIVE_WHEELS := $(NATIVE_DIR)
# Compose v2 (not packaged in Debian), built from the Go module proxy like Jaeger and
# installed as the docker CLI plugin; tools/images.py builds the offline images.
COMPOSE_VERSION := v2.40.3
COMPOSE_BIN := $(TOOLS_BIN)/docker-compose-$(COMPOSE_VERSION)
COMPOSE_PLUGIN := $(HOME)/.docker/cli-plugins/docker-compose
COMPOSE_FILES := -f compose/docker-compose.yml
OFFLINE_ENV := build/compose-offline.env
OFFLINE_FILES := --env-file $(OFFLINE_ENV) -f compose/docker-compose.yml -f compose/docker-compose.offline.yml
# compose-up: registry (official images), offline (built here), or auto (offline when no registry answers)
COMPOSE_VARIANT ?= auto

.PHONY: bench-thanos thanos native compose-up compose-down compose-plugin compose-images help venv run sample prereqs test check lint typecheck unit live bench generate clean otelcol jaeger bench-collector bench-dashboards bench-detection dashboard-linter wheelhouse deploy-artifacts vegeta bench-controller
help:
	@echo "make run    - simulate a factory, print its accounting, serve /metrics on $(LISTEN) until Ctrl-C"
	@echo "make test   - everything CI runs (lint, types, unit, live tests against real Prometheus)"
	@echo "make check  - the fast inner loop: lint, types, unit tests without live servers"
	@echo "make bench  - ingest benchmarks (writes benchmarks/results/)"
	@echo "make generate - regenerate every generated file (docs/metrics.md, compose/config/, dashboards/ JSON, rules, rule tests)"

$(BIN)/.stamp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
	$(BIN)/pip install -q -e '.[dev]' 2>&1 | grep -v "is ignored" || true
	$(BIN)/python -c "import gwms_obs, prometheus_client, opentelemetry.sdk, hypothesis"
	touch $@
venv: $(BIN)/.stamp $(NATIVE_STAMP)

# order-only on the venv (it brings maturin): a new venv, as every clean clone makes, must not
# rebuild a wheel whose inputs are unchanged (its hash names the dir)
$(NATIVE_DIR)/.built: | $(BIN)/.stamp
	@command -v cargo >/dev/null || { echo "native/: cargo (a Rust toolchain) is needed to build the readers' fast path" >&2; exit 1; }
	rm -rf $(NATIVE_DIR).tmp
	cd native && VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(BIN)):$$PATH maturin build --release --locked --zig --compatibility manylinux_2_28 -o $(NATIVE_DIR).tmp
	rm -rf $(NATIVE_DIR) && mv $(NATIVE_DIR).tmp $(NATIVE_DIR) && touch $@
$(NATIVE_STAMP): $(NATIVE_DIR)/.built
	$(BIN)/pip install -q --no-deps --force-reinstall $(NATIVE_DIR)/*.whl
	rm -f $(VENV)/.native-* && touch $@
	$(BIN)/python -c "from gwms_obs import native; d = native.describe(); print('readers:', d); assert native.core, d"
native: $(NATIVE_STAMP)

$(SAMPLE)/.done: $(BIN)/.stamp
	rm -rf $(SAMPLE) $(SAMPLE).checkpoint.json
	$(BIN)/gwms-obs simulate --out $(SAMPLE) --pilots $(SAMPLE_PILOTS) --seed 1
	touch $@
sample: $(SAMPLE)/.done

run: sample
	@mkdir -p build
	$(BIN)/gwms-obs report --factory-dir $(SAMPLE) --format $(RUN_FORMAT) --plot build/sample-accounting.png
	@echo "accounting plot: build/sample-accounting.png"
	@echo "serving http://$(LISTEN)/metrics - Ctrl-C to stop"
	$(BIN)/gwms-obs export --factory-dir $(SAMPLE) --listen $(LISTEN) --checkpoint $(SAMPLE).checkpoint.json --interval 30 $(RUN_ARGS)

lint: venv
	$(BIN)/ruff check exporters tests benchmarks dashboards tools
	$(BIN)/ruff format --check exporters tests benchmarks dashboards tools

typecheck: venv
	$(BIN)/mypy

# pytest-xdist workers: one a core. --dist loadfile keeps a test file on one worker, so a
# module's servers start once; the live tests spend most of their time waiting on servers,
# which the other worker fills.
TEST_WORKERS ?= $(shell nproc)
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadfile

unit: venv
	$(BIN)/pytest -q -m "not live" -p no:cacheprovider $(PYTEST_PARALLEL)

live: venv otelcol jaeger thanos vegeta
	$(BIN)/pytest -q -m live -p no:cacheprovider -rs $(PYTEST_PARALLEL)

check: lint typecheck unit

# The Debian packages make test needs (tools/prereqs.sh has the list): as root
# installs what is missing, otherwise fails with the command to run.
prereqs:
	PYTHON=$(PYTHON) tools/prereqs.sh

# What make test builds and checks before its tests. They are independent of each other, so
# they run side by side: cold, most of it waits on the network (the module proxy, PyPI), and
# one Go build links on one core while another compiles (benchmarks/results/ci.md).
TEST_BUILDS := lint typecheck otelcol jaeger thanos dashboard-linter compose-plugin vegeta
TEST_BUILD_JOBS ?= 4

# prereqs first: a missing package fails here, not as skips after the Go builds.
# GWMS_OBS_STRICT_SKIPS: a skip that tests/conftest.py does not allow fails.
test: prereqs
	$(MAKE) --no-print-directory -j$(TEST_BUILD_JOBS) -O $(TEST_BUILDS)
	GWMS_OBS_STRICT_SKIPS=1 GWMS_OBS_REQUIRE_NATIVE=1 $(BIN)/pytest -q -p no:cacheprovider -rfEs $(PYTEST_PARALLEL) --durations=25

# Not `go install ...@version`: its go.mod has a replace directive, which go
# install refuses; build the pinned module from the proxy as the main module.
# The proxy here refuses one of v0.2.0's dependencies (a grafana/grafana
# pseudo-version), so a failed build is reported, not fatal: the test that
# runs the linter then skips and says why; our own lint (dashboards/gen/lint.py)
# always runs.
$(DASHBOARD_LINTER):
	@mkdir -p $(TOOLS_BIN)
	go mod download github.com/grafana/dashboard-linter@$(DASHBOARD_LINTER_VERSION)
	cd $(GOMODCACHE)/github.com/grafana/dashboard-linter@$(DASHBOARD_LINTER_VERSION) && \
	  CGO_ENABLED=0 go build -trimpath -o $@.tmp .
	mv $@.tmp $@
dashboard-linter:
	@mkdir -p $(TOOLS_BIN)
	@$(MAKE) --no-print-directory $(DASHBOARD_LINTER) >$(TOOLS_BIN)/dashboard-linter-build.log 2>&1 \
	  || echo "dashboard-linter $(DASHBOARD_LINTER_VERSION) not built: $$(grep -m1 -iE 'error|forbidden|not available' $(TOOLS_BIN)/dashboard-linter-build.log)"

# The one generator of committed files (tools/generate.py); tests/test_generated.py fails on drift.
generate: venv
	$(BIN)/python -m tools.generate

bench: venv
	$(BIN)/python benchmarks/ingest.py
	$(BIN)/python benchmarks/trace_shell.py

# The dashboards at 500 entries: series and query time per dashboard, the exporter's scrape.
bench-dashboards: venv
	$(BIN)/python benchmarks/dashboards.py

# Precision/recall of analyze, an isolation forest and the site-health rules on labelled anomalies.
bench-detection: venv
	$(BIN)/python benchmarks/detection.py

# The global tier's sizing: series per factory, bytes per sample after compaction, disk per year,
# 30-day global query latency over three backfilled factories: benchmarks/results/thanos.md.
bench-thanos: venv thanos
	$(BIN)/python benchmarks/thanos.py

bench-collector: venv otelcol jaeger
	$(BIN)/python benchmarks/collector.py

# The controller's GET /v1/decide under vegeta (5,000/s open loop, up to 1,000 connections), SQLite and
# PostgreSQL, 1 and 2 workers, the highest rate meeting p99 <= 20 ms: benchmarks/results/controller.md.
bench-controller: venv vegeta
	$(BIN)/python benchmarks/controller.py --workers 1 2 --database sqlite postgres --find-max --floor --profile --record

# Go-built servers (cold builds measured in benchmarks/results/collector.md).
$(OCB):
	@mkdir -p $(TOOLS_BIN)/.ocb-tmp
	GOBIN=$(TOOLS_BIN)/.ocb-tmp go install go.opentelemetry.io/collector/cmd/builder@v$(OTELCOL_VERSION)
	mv $(TOOLS_BIN)/.ocb-tmp/builder $@

# no prerequisite on the manifest's mtime (a fresh checkout would look newer):
# its hash is in $(OTELCOL), so a changed manifest is a different target.
$(OTELCOL): | $(OCB)
	rm -rf build/otelcol-gwms && mkdir -p build
	$(OCB) --config=$(OTELCOL_MANIFEST)
	mv build/otelcol-gwms/otelcol-gwms $@.tmp && mv $@.tmp $@
otelcol: $(OTELCOL)
	@echo "$(OTELCOL)"

# Not `go install .../cmd/jaeger@version`: Jaeger's go.mod has a replace directive
# (sarama), which go install refuses. So: fetch the pinned module from the proxy
# (checksummed by sum.golang.org) and build it as the main module, honouring its go.sum.
$(JAEGER):
	@mkdir -p $(TOOLS_BIN)
	go mod download github.com/jaegertracing/jaeger@$(JAEGER_VERSION)
	cd $(GOMODCACHE)/github.com/jaegertracing/jaeger@$(JAEGER_VERSION) && CGO_ENABLED=0 go build -trimpath \
	  -ldflags='-s -w -X github.com/jaegertracing/jaeger/internal/version.latestVersion=$(JAEGER_V2)' -o $@.tmp ./cmd/jaeger
	mv $@.tmp $@
jaeger: $(JAEGER)
	@echo "$(JAEGER)"

# vegeta's go.mod has no replace/exclude directives, so plain `go install` of the pinned tag.
$(VEGETA):
	@mkdir -p $(TOOLS_BIN)/.vegeta-tmp
	GOBIN=$(TOOLS_BIN)/.vegeta-tmp CGO_ENABLED=0 go install -trimpath \
	  -ldflags='-s -w -X main.Version=$(VEGETA_VERSION)' github.com/tsenart/vegeta/v12@$(VEGETA_VERSION)
	mv $(TOOLS_BIN)/.vegeta-tmp/vegeta $@ && rmdir $(TOOLS_BIN)/.vegeta-tmp
vegeta: $(VEGETA)
	@echo "$(VEGETA)"

# Not `go install`: Thanos's go.mod has replace directives, which go install refuses; build the
# pinned module from the proxy as the main module, honouring its go.sum (~10 min cold on 2 cores).
$(THANOS):
	@mkdir -p $(TOOLS_BIN)
	go mod download github.com/thanos-io/thanos@$(THANOS_VERSION)
	cd $(GOMODCACHE)/github.com/thanos-io/thanos@$(THANOS_VERSION) && CGO_ENABLED=0 go build -trimpath -tags $(THANOS_TAGS) \
	  -ldflags='-s -w -X github.com/prometheus/common/version.Version=$(THANOS_VERSION:v%=%) -X github.com/prometheus/common/version.Branch=HEAD' \
	  -o $@.tmp ./cmd/thanos
	mv $@.tmp $@
thanos: $(THANOS)
	@echo "$(THANOS)"

# Artifacts for `ansible-playbook deploy.yml` on air-gapped hosts (docs/deploy.md):
# the exporter's wheelhouse, our collector and Jaeger, each with its sha256. The
# inventories read them from here ({{ playbook_dir }}/../build/artifacts, whatever
# the inventory's own path); tests/test_readme_deploy.py reads this variable.
ARTIFACTS_DIR := build/artifacts
wheelhouse: venv
	$(BIN)/python -m tools.wheelhouse $(ARTIFACTS_DIR)
deploy-artifacts: wheelhouse otelcol jaeger thanos
	cp $(OTELCOL) $(ARTIFACTS_DIR)/otelcol-gwms && cp $(JAEGER) $(ARTIFACTS_DIR)/jaeger && cp $(THANOS) $(ARTIFACTS_DIR)/thanos
	cd $(ARTIFACTS_DIR) && sha256sum otelcol-gwms jaeger thanos *-wheelhouse.tar.gz

# `make -s print-ARTIFACTS_DIR`: a variable's value, for the tests and scripts.
print-%:
	@echo '$($*)'

clean:
	rm -rf build $(VENV)

# Not `go install`: compose's go.mod has exclude directives, which go install refuses;
# build the pinned module from the proxy as the main module (~4-12 min cold on 2 cores).
$(COMPOSE_BIN):
	@mkdir -p $(TOOLS_BIN)
	go mod download github.com/docker/compose/v2@$(COMPOSE_VERSION)
	cd $(GOMODCACHE)/github.com/docker/compose/v2@$(COMPOSE_VERSION) && CGO_ENABLED=0 go build -trimpath \
	  -ldflags='-s -w -X github.com/docker/compose/v2/internal.Version=$(COMPOSE_VERSION)' -o $@.tmp ./cmd
	mv $@.tmp $@
# Installed as the user's docker CLI plugin, unless a compose v2 is already there.
compose-plugin:
	@if docker compose version 2>/dev/null | grep -q 'version v2'; then docker compose version; else \
	  $(MAKE) --no-print-directory $(COMPOSE_BIN) && mkdir -p $(dir $(COMPOSE_PLUGIN)) && \
	  ln -sf $(COMPOSE_BIN) $(COMPOSE_PLUGIN) && docker compose version; fi

# The offline variant's images (tools/images.py), tagged by the hash of their inputs.
compose-images: venv otelcol jaeger thanos
	$(BIN)/python -m tools.images --env-file $(OFFLINE_ENV)

# The same stack on a laptop (Docker with compose v2); configs from `make generate`.
# A development token from compose/INSECURE-development-token.env: never on a factory.
compose-up: compose-plugin
	@variant=$(COMPOSE_VARIANT); \
	if [ $$variant = auto ]; then \
	  if timeout 60 docker pull -q $$(sed -n 's/^    image: \(prom\/alertmanager:.*\)/\1/p' compose/docker-compose.yml) >/dev/null 2>&1; \
	  then variant=registry; else variant=offline; \
	    echo "compose-up: no image registry reachable: the offline variant (images built here, docs/compose.md)"; fi; \
	fi; \
	if [ $$variant = offline ]; then \
	  $(MAKE) --no-print-directory compose-images && docker compose $(OFFLINE_FILES) up -d --wait; \
	else docker compose $(COMPOSE_FILES) up --build -d --wait; fi
	@echo "Prometheus http://127.0.0.1:9090  Alertmanager http://127.0.0.1:9093  Jaeger http://127.0.0.1:16686  mail http://127.0.0.1:8025"
	@echo "Grafana http://127.0.0.1:3000 (anonymous viewer; admin/admin) - registry variant, or offline with --profile grafana"
compose-down:
	@if [ -f $(OFFLINE_ENV) ]; then docker compose $(OFFLINE_FILES) down; else docker compose $(COMPOSE_FILES) down; fi
