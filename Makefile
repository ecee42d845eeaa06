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
# `make run` replaces its own default results folder; an OUT_DIR you name is never overwritten
RUN_OVERWRITE = $(if $(filter file,$(origin OUT_DIR)),train.overwrite=true)
PYTEST_ARGS ?=
# Test processes side by side (pytest-xdist): one a core, at most 4 (a test may start ranks of its
# own); TEST_JOBS=0 runs the suite in one process. Most tests wait on subprocesses' imports.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 4 ? n : 4 )))
# Images (containers/README.md): FRAMEWORK above, FLAVOR, and optional build inputs.
FLAVOR ?= cpu
IMAGE ?= sciperf-$(FRAMEWORK):$(FLAVOR)
ENGINE ?=
BASE_IMAGE ?=
WHEELS ?=
CA_BUNDLE ?=
REGISTRY ?=
IMAGE_OPTS = --framework $(FRAMEWORK) --flavor $(FLAVOR) --tag $(IMAGE) \
  $(if $(ENGINE),--engine $(ENGINE)) $(if $(BASE_IMAGE),--base $(BASE_IMAGE)) \
  $(if $(WHEELS),--wheels $(WHEELS)) $(if $(CA_BUNDLE),--ca $(CA_BUNDLE)) \
  $(if $(filter command line,$(origin PIP_EXTRA_INDEX_URL)),\
    --build-arg PIP_EXTRA_INDEX_URL=$(PIP_EXTRA_INDEX_URL))
SHELL_SCRIPTS = $(wildcard containers/*.sh launchers/slurm/*.sh scripts/*.sh) .ci/run

.PHONY: help setup setup-test run test bench lint clean image sif push test-images render-images

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'
	@echo "  variables: WORKLOAD FRAMEWORK EXPERIMENT DATA_DIR OUT_DIR ARGS (extra overrides)"
	@echo "  image variables: FRAMEWORK=pytorch|tensorflow FLAVOR=cpu|gpu IMAGE (tag)"
	@echo "    ENGINE=podman|docker BASE_IMAGE WHEELS=DIR CA_BUNDLE=FILE PIP_EXTRA_INDEX_URL REGISTRY"

setup: ## create .venv and install sciperf + frameworks (idempotent)
	@containers/install.sh --venv $(VENV) --frameworks $(FRAMEWORKS) --dev

setup-test: ## setup + what the tests exercise: OpenMPI, Horovod (cached build), DALI
	@containers/install.sh --venv $(VENV) --frameworks $(FRAMEWORKS) --dev --mpi --horovod --dali

run: setup ## generate synthetic data, train mini CosmoFlow to target, check the log
	$(SCIPERF) run workload=$(WORKLOAD) framework=$(FRAMEWORK) experiment=$(EXPERIMENT) \
	  data.dir=$(DATA_DIR) output_dir=$(OUT_DIR) $(RUN_OVERWRITE) $(ARGS)

test: setup-test ## run the test suite
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist worksteal $(PYTEST_ARGS) tests

bench: setup ## measure throughput; writes bench/<workload>.json
	$(SCIPERF) bench workload=$(WORKLOAD) framework=$(FRAMEWORKS) $(ARGS)

lint: setup ## ruff, hadolint (Dockerfiles), shellcheck (shell scripts), rendered files fresh
	$(VENV)/bin/ruff check common frameworks launchers tests containers
	$(VENV)/bin/hadolint containers/*/*.Dockerfile
	shellcheck $(SHELL_SCRIPTS)
	$(PY) containers/images.py --check

image: ## build image sciperf-FRAMEWORK:FLAVOR (FLAVOR=cpu|gpu) from this checkout (podman or docker)
	containers/image.sh build $(IMAGE_OPTS)

sif: image ## Apptainer image build/images/sciperf-FRAMEWORK-FLAVOR.sif from the Docker image
	containers/image.sh sif $(IMAGE_OPTS)

push: ## push IMAGE to REGISTRY=host/namespace as sciperf-FRAMEWORK:FLAVOR[-<git>]
	containers/image.sh push $(IMAGE_OPTS) --registry "$(REGISTRY)"

render-images: ## regenerate containers/*/*.Dockerfile and *.def from containers/images.py
	$(PY) containers/images.py

test-images: ## build the TensorFlow cpu image with podman (local Debian base), train + check in it
	@containers/test-images.sh; rc=$$?; \
	if [ $$rc = 77 ] && [ "$(REQUIRE_IMAGES)" != 1 ]; then \
	  echo "make test-images: SKIPPED (reason above; REQUIRE_IMAGES=1 makes this fail)"; exit 0; fi; \
	exit $$rc

clean: ## remove generated data, results and saved images (keeps .venv and bench records)
	rm -rf data results build/images
	find bench -mindepth 1 -maxdepth 1 ! -name 'gpu-*.json' ! -name '*.md' -exec rm -rf {} + 2>/dev/null || true
