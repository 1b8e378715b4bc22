# The README's commands. Each creates its own virtualenv in .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DURATION ?= 60

.PHONY: demo test lint bench clean references

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ci-autoscaler demo --duration $(DEMO_DURATION)

# terraform's AWS provider mirror: where the machine keeps it (terraform's implied mirror
# directories, or /opt); the e2e tests read TF_PLUGIN_DIR and never walk the filesystem.
TF_MIRROR_ROOTS := /opt /usr/local/share /usr/share $(HOME)/.terraform.d $(HOME)/.local/share
TF_PROVIDER := */registry.terraform.io/hashicorp/aws/*/terraform-provider-aws_*

test: $(STAMP) references
	TF_PLUGIN_DIR="$${TF_PLUGIN_DIR:-$$(find $(TF_MIRROR_ROOTS) -maxdepth 7 -path '$(TF_PROVIDER)' \
	  -print -quit 2>/dev/null | sed 's#/registry.terraform.io/.*##')}" $(BIN)/python -m pytest

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
	$(BIN)/ruff check autoscaler tests bench
	$(BIN)/ruff format --check autoscaler tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/hadolint Dockerfile
	$(CHECKOV_VENV)/bin/checkov --directory terraform --framework terraform --quiet --compact --skip-download

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) .mypy_cache .ruff_cache .pytest_cache
