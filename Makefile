# Two commands for a newcomer:
#   make lab    create .venv on first use, then open JupyterLab on the notebooks
#   make test   create or reuse .venv, then run the whole suite
# For the edit-test loop: make test-fast (no process groups, no notebooks; under a minute).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.dpsim-installed

# The tested torch release is pinned in CI and on machines without an NVIDIA
# driver; elsewhere pip resolves the plain `torch>=2.4` requirement.
ifeq ($(origin PIN_TORCH), undefined)
  PIN_TORCH := $(shell if [ -n "$$CI" ] || ! command -v nvidia-smi >/dev/null 2>&1; then echo 1; else echo 0; fi)
endif
ifeq ($(PIN_TORCH),1)
  CONSTRAINTS := -c constraints/ci.txt
endif

.PHONY: lab test test-fast lint test-gpu test-browser bench exercises clean

$(STAMP): pyproject.toml constraints/ci.txt
	@echo "dpsim: setting up $(VENV) (first time: about 1-3 minutes)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(CONSTRAINTS) -e ".[dev]"
	@touch $(STAMP)

lab: $(STAMP)
	$(BIN)/python -m dpsim lab

lint: $(STAMP)
	$(BIN)/ruff check dpsim tests benchmarks scripts
	$(BIN)/mypy

exercises: $(STAMP)
	$(BIN)/python -m dpsim exercises build

test: $(STAMP)
	$(BIN)/ruff check dpsim tests benchmarks scripts
	$(BIN)/mypy
	$(BIN)/python -m dpsim exercises check
	$(BIN)/python -m pytest tests notebooks solutions --nbval-lax --nbval-current-env -p no:cacheprovider

# Tests not marked `slow` start no process (tests/conftest.py enforces it).
test-fast: $(STAMP)
	$(BIN)/ruff check dpsim tests benchmarks scripts
	$(BIN)/python -m pytest tests -m "not slow" --ignore=tests/browser -q -p no:cacheprovider

test-gpu: $(STAMP)
	$(BIN)/python -m pytest tests -m gpu -p no:cacheprovider

test-browser: $(STAMP)
	bash .ci/install-browser
	$(BIN)/python -m pytest tests/browser -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache artifacts
