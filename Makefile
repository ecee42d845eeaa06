# sciperf — `make run` and `make test` do everything on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
SCIPERF := $(VENV)/bin/sciperf
FRAMEWORKS ?= pytorch,tensorflow
WORKLOAD ?= cosmoflow
FRAMEWORK ?= pytorch
EXPERIMENT ?= mini
DATA_DIR ?= data/$(WORKLOAD)-$(EXPERIMENT)
OUT_DIR ?= results/$(WORKLOAD)-$(FRAMEWORK)-$(EXPERIMENT)
ARGS ?=
PYTEST_ARGS ?=

.PHONY: help setup setup-test run test bench lint clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'
	@echo "  variables: WORKLOAD FRAMEWORK EXPERIMENT DATA_DIR OUT_DIR ARGS (extra overrides)"

setup: ## create .venv and install sciperf + frameworks (idempotent)
	@containers/install.sh --venv $(VENV) --frameworks $(FRAMEWORKS) --dev

setup-test: ## setup + what the tests exercise: OpenMPI, Horovod (cached build), DALI
	@containers/install.sh --venv $(VENV) --frameworks $(FRAMEWORKS) --dev --mpi --horovod --dali

run: setup ## generate synthetic data, train mini CosmoFlow to target, check the log
	$(SCIPERF) run workload=$(WORKLOAD) framework=$(FRAMEWORK) experiment=$(EXPERIMENT) \
	  data.dir=$(DATA_DIR) output_dir=$(OUT_DIR) $(ARGS)

test: setup-test ## run the test suite
	$(PY) -m pytest -q $(PYTEST_ARGS) tests

bench: setup ## measure throughput; writes bench/<workload>.json
	$(SCIPERF) bench workload=$(WORKLOAD) framework=$(FRAMEWORKS) $(ARGS)

lint: setup ## ruff
	$(VENV)/bin/ruff check common frameworks launchers tests
	shellcheck containers/*.sh launchers/slurm/*.sh

clean: ## remove generated data and results (keeps .venv)
	rm -rf data results bench
