# neuron-emu: `make demo` and `make test` work from a fresh clone on a fresh machine.
# They create .venv, install the pinned Python packages, apt-install the build tools that are
# missing, build the C++ layers (ccache + ninja), and are fast when nothing changed.

SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
BUILD ?= build
JOBS ?= $(shell nproc)
VPY := $(VENV)/bin/python
STAMP_DEPS := $(VENV)/.stamp-deps
STAMP_SYS := $(BUILD)/.stamp-sys
STAMP_INSTALL := $(VENV)/.stamp-install
export CCACHE_DIR ?= $(HOME)/.cache/ccache
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_SLOPPINESS := include_file_mtime,include_file_ctime,time_macros,pch_defines
# Tests and examples always import this checkout's Python packages.
RUN_ENV := PYTHONPATH=$(CURDIR)/python PATH=$(CURDIR)/$(VENV)/bin:$$PATH
# Tests use caches private to this checkout (never the user's /tmp/neff_cache or ~/.cache).
TEST_ENV := $(RUN_ENV) TORCH_NEURONX_NEFF_CACHE_DIR=$(CURDIR)/$(BUILD)/test-cache/neff \
  NEURON_EMU_NKI_CACHE_DIR=$(CURDIR)/$(BUILD)/test-cache/nki

APT_PKGS := cmake ninja-build ccache libgtest-dev g++

.PHONY: all build demo test test-cpp test-python conformance clean sys deps

all: build

# --- system packages -------------------------------------------------------------------------
$(STAMP_SYS):
	@missing=""; \
	for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get install -y --no-install-recommends $$missing || \
	  { $$SUDO apt-get update && $$SUDO apt-get install -y --no-install-recommends $$missing; }; \
	fi
	@mkdir -p $(BUILD) && touch $@

sys: $(STAMP_SYS)

# --- Python environment ----------------------------------------------------------------------
$(VPY):
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(STAMP_DEPS): requirements.txt | $(VPY)
	$(VPY) -m pip install -q -r requirements.txt
	@touch $@

deps: $(STAMP_DEPS)

# --- C++ build -------------------------------------------------------------------------------
$(BUILD)/build.ninja: CMakeLists.txt $(STAMP_SYS) $(STAMP_DEPS)
	cmake -S . -B $(BUILD) -G Ninja \
	  -DCMAKE_BUILD_TYPE=Release \
	  -DPython_EXECUTABLE=$(CURDIR)/$(VPY)
	@touch $@

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)
	@$(MAKE) --no-print-directory $(STAMP_INSTALL)
	@for t in neuron-ls neff-dump; do \
	  if [ -x $(BUILD)/csrc/tools/$$t ]; then ln -sf $(CURDIR)/$(BUILD)/csrc/tools/$$t $(VENV)/bin/$$t; fi; \
	done

# The Python packages as the real stack's distributions (torch-neuronx, nki, neuronx-cc), editable.
DISTS := nki neuronx-cc torch-neuronx
$(STAMP_INSTALL): $(foreach d,$(DISTS),distributions/$(d)/pyproject.toml) $(STAMP_DEPS)
	@if $(VPY) -m pip show -q neuron-emu >/dev/null 2>&1; then $(VPY) -m pip uninstall -q -y neuron-emu; fi
	$(VPY) -m pip install -q --no-build-isolation --no-deps $(foreach d,$(DISTS),-e distributions/$(d))
	@touch $@

# --- what users run --------------------------------------------------------------------------
demo: build
	@$(RUN_ENV) bash examples/run_demo.sh

test: build
	@echo "== C++ tests (ctest) =="
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@echo "== Python tests (pytest) =="
	$(TEST_ENV) $(VPY) -m pytest -q $(wildcard tests/python tests/workloads tests/conformance) -m "not slow"

test-cpp: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-python: build
	$(TEST_ENV) $(VPY) -m pytest -q tests/python

conformance: build
	$(TEST_ENV) $(VPY) -m pytest -q tests/conformance --full-sweep

clean:
	rm -rf $(BUILD)
