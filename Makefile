# The README's commands. Each creates its own virtualenv in .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The demo needs the package and moto only (.[demo]); the development tools (.[dev], which
# includes moto) are installed by the first test, lint or bench.
DEMO_STAMP := $(VENV)/.installed-demo
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check
DEMO_DURATION ?= 60
# Byte-compiled once at install: the machines set PYTHONDONTWRITEBYTECODE, so an import
# never writes a .pyc and every command would compile the package again.
COMPILE := $(BIN)/python -m compileall -q autoscaler

.PHONY: demo test test-fast test-cpu lint bench clean references docs lock

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) -e '.[dev]'
	$(COMPILE)
	touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml
	@echo "installing ci-autoscaler and moto into $(VENV) (first run only) ..."
	$(PYTHON) -m venv $(VENV)
	$(PIP) -e '.[demo]'
	$(COMPILE)
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/ci-autoscaler demo --duration $(DEMO_DURATION)

# terraform's AWS provider mirror: where the machine keeps it (terraform's implied mirror
# directories, or /opt); the e2e tests read TF_PLUGIN_DIR and never walk the filesystem.
TF_MIRROR_ROOTS := /opt /usr/local/share /usr/share $(HOME)/.terraform.d $(HOME)/.local/share
TF_PROVIDER := */registry.terraform.io/hashicorp/aws/*/terraform-provider-aws_*
TF_ENV = TF_PLUGIN_DIR="$${TF_PLUGIN_DIR:-$$(find $(TF_MIRROR_ROOTS) -maxdepth 7 \
  -path '$(TF_PROVIDER)' -print -quit 2>/dev/null | sed 's\#/registry.terraform.io/.*\#\#')}"

# The whole suite, one pytest-xdist worker per core (PYTEST_WORKERS=0: in this process).
# worksteal: an idle worker takes half of a busy one's queue. With the default (load) one
# worker was handed every end-to-end test in one chunk and ran them alone while the other
# had finished everything else and waited.
PYTEST_WORKERS ?= auto
XDIST := -n $(PYTEST_WORKERS) --dist worksteal
# Tests run with byte-code caches: with PYTHONDONTWRITEBYTECODE each worker compiled every
# test module again (pytest caches its assertion rewrites only where Python may write
# byte code; 11 s of CPU per worker to collect, 4 s cached), and every `python -m
# autoscaler` of the tests compiled the modules changed since the install. __pycache__ is
# ignored by git.
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest

test: $(STAMP) references
	$(COMPILE)
	$(TF_ENV) $(PYTEST) $(XDIST)

# The unit tier: pure code, fakes at the ports; no moto server, no network, no tools.
test-fast: $(STAMP)
	$(PYTEST) tests/unit $(XDIST) -q

# The whole suite with each test's CPU seconds (tests/cpu_report.py): the top 40 tests,
# files and fixture setups. CPU, not wall: the machine is shared.
test-cpu: $(STAMP) references
	$(COMPILE)
	$(TF_ENV) $(PYTEST) $(XDIST) -q --cpu-report 40

# GitHub's OpenAPI description and webhook examples/schemas (pinned in
# tests/conformance/references.txt), fetched once with npm into .cache/octokit.
references:
	bash tests/conformance/fetch_references.sh

# checkov lints the terraform like ruff lints the Python: statically, so it runs with the
# other linters. It gets a virtualenv of its own, created here (a missing checkov fails
# lint, it is never skipped): it pins older versions of libraries the project uses
# (boto3, botocore), which must not replace the project's own.
CHECKOV_VENV ?= .venv-checkov
CHECKOV_VERSION := 3.3.30

$(CHECKOV_VENV)/.installed:
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check checkov==$(CHECKOV_VERSION)
	touch $@

lint: $(STAMP) $(CHECKOV_VENV)/.installed
	$(BIN)/ruff check autoscaler tests bench docgen
	$(BIN)/ruff format --check autoscaler tests bench docgen
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/hadolint Dockerfile
	$(CHECKOV_VENV)/bin/checkov --directory terraform --framework terraform --quiet --compact --skip-download
	$(BIN)/python -m docgen --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The docs site: regenerate docs/reference/ from the code, then build it into site/.
docs: $(STAMP)
	$(BIN)/python -m docgen
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/python -m bench

# The image's dependencies, every version pinned with its files' hashes (the Dockerfile
# installs from it with --require-hashes); tests/unit/test_lock_file.py fails when
# pyproject.toml asks for something it does not pin.
lock: $(STAMP)
	$(BIN)/pip-compile --quiet --generate-hashes --strip-extras --allow-unsafe \
	  --no-emit-index-url --no-emit-find-links --output-file requirements.lock pyproject.toml

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) .mypy_cache .ruff_cache .pytest_cache site
