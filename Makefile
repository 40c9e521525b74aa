# Two commands for a newcomer:
#   make lab    create .venv on first use, then open JupyterLab on the notebooks
#   make test   create or reuse .venv, then run the whole suite
# For the edit-test loop: make test-fast (no process groups, no notebooks; under a minute).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.dpsim-installed

# Which torch goes into .venv: TORCH=cpu, TORCH=default or TORCH=ci (README, "Install").
# Unset, it is chosen here: ci when CI is set (today's CI: the standard package index only);
# cpu on Linux without an NVIDIA driver (no nvidia-smi), so that no CUDA libraries are
# downloaded; default elsewhere (a CUDA machine, macOS, WSL with an NVIDIA driver).
#   ci       the tested release (constraints/ci.txt) from the standard package index
#   cpu      the tested release from PyTorch's CPU wheels; if that index cannot be
#            reached, the ci install with a warning
#   default  the standard package index's newest torch (on Linux: the CUDA build)
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
ifeq ($(origin TORCH), undefined)
  TORCH := $(shell if [ -n "$$CI" ]; then echo ci; \
    elif [ "`uname -s`" = Linux ] && ! command -v nvidia-smi >/dev/null 2>&1; then echo cpu; \
    else echo default; fi)
endif
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check
PINNED := -c constraints/ci.txt
ifeq ($(TORCH),ci)
  CONSTRAINTS := $(PINNED)
  TORCH_STEP := @true
endif
ifeq ($(TORCH),cpu)
  CONSTRAINTS := $(PINNED)
  TORCH_STEP := $(PIP) --retries 1 --timeout 30 --index-url $(TORCH_CPU_INDEX) $(PINNED) torch \
    || echo "dpsim: $(TORCH_CPU_INDEX) cannot be reached: installing the pinned torch from \
the standard package index instead (on Linux that is the CUDA build, about 3 GB)"
endif
ifeq ($(TORCH),default)
  CONSTRAINTS :=
  TORCH_STEP := @true
endif
ifndef TORCH_STEP
  $(error TORCH=$(TORCH) is not known; allowed: cpu, default, ci)
endif

.PHONY: lab test test-fast lint test-gpu gpu-bundle test-floor test-browser bench exercises clean \
  site site-serve cluster

# Switching TORCH later: `make clean` first (an installed torch satisfies every choice).
$(STAMP): pyproject.toml constraints/ci.txt
	@echo "dpsim: setting up $(VENV) with TORCH=$(TORCH) (README, Install: download and time)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -c "import sys; sys.exit(sys.version_info < (3, 11) and \
	  'dpsim needs Python 3.11+, $(PYTHON) is ' + sys.version.split()[0] + \
	  ': make clean, then make PYTHON=python3.11 (or newer)')"
	$(TORCH_STEP)
	$(PIP) $(CONSTRAINTS) -e ".[dev]"
	@touch $(STAMP)

lab: $(STAMP)
	$(BIN)/python -m dpsim lab

lint: $(STAMP)
	$(BIN)/ruff check dpsim tests benchmarks scripts
	$(BIN)/mypy

# The course as a static site in build/site (open build/site/index.html, or make site-serve):
# every chapter run on this machine (cached in build/site-executed: a notebook runs again
# only when it or dpsim changed), then Sphinx with myst-nb. No network. README, "The site".
site: $(STAMP)
	$(BIN)/python -m dpsim site build --out build/site

site-serve: $(STAMP)
	$(BIN)/python -m dpsim site serve --out build/site --port $(or $(PORT),8000)

# A real Slurm cluster on this machine (README, "A cluster on this machine"): munge, slurmctld
# and two slurmd on 127.0.0.1 in <tmp>/dpsim-slurm-<uid>. Stop it: python -m dpsim cluster down.
# Without Slurm's packages it says what to install (.ci/install-slurm on Debian) and fails.
cluster: $(STAMP)
	$(BIN)/python -m dpsim cluster up

exercises: $(STAMP)
	$(BIN)/python -m dpsim exercises build

# The test files run spread over TEST_WORKERS pytest-xdist workers (2: CI's cores; more on
# a bigger machine, e.g. make test TEST_WORKERS=4; 0 runs everything in this one process).
# --dist loadfile keeps each file on one worker, so a notebook's nbval cells run in order in
# one kernel and a module's shared fixture (one launch, one grading run, one JupyterLab)
# runs once. --no-loadscope-reorder hands out files in collection order: conftest.py puts
# the notebooks/ nbval files first (their nbval run writes the executed copies the browser
# test opens, running live only what their widgets need, see
# tests/support/executed_notebooks.py), then the browser test (tests/browser), so that it
# starts as the notebooks end and no copy is waited for long.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/ruff check dpsim tests benchmarks scripts
	$(BIN)/mypy
	$(BIN)/python -m dpsim exercises check
	$(BIN)/python -m pytest tests notebooks solutions --nbval-lax --nbval-current-env -p no:cacheprovider \
	  -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=40

# Tests not marked `slow` start no process (tests/conftest.py enforces it); they too are
# spread over TEST_WORKERS workers, without the notebook plugin (about 55 s on 2 cores).
test-fast: $(STAMP)
	$(BIN)/ruff check dpsim tests benchmarks scripts
	$(BIN)/python -m pytest tests -m "not slow" --ignore=tests/browser -q -p no:cacheprovider \
	  -p no:nbval -n $(TEST_WORKERS) --dist loadfile

# On a CUDA machine: the GPU tests, then the GPU numbers into benchmarks/results/gpu_*.json.
test-gpu: $(STAMP)
	$(BIN)/python -m pytest tests -m gpu -p no:cacheprovider
	$(BIN)/python scripts/record_gpu.py

# The wheels the GPU check (scripts/gpu_check.sh) needs on a GPU machine with no package
# index: scripts/gpu_bundle.txt, for CPython 3.12 on manylinux x86-64, into build/gpu-bundle
# (README, "Running the GPU check"). Needs pip and the package index, not the .venv.
gpu-bundle:
	$(PYTHON) scripts/gpu_bundle.py download --dest build/gpu-bundle

# The oldest torch the kit supports (pyproject's floor) in its own .venv-floor, on the fast
# tests and the real DP, DDP, FSDP2 and torchrun runs. TORCH=cpu takes PyTorch's CPU wheels.
FLOOR_VENV := .venv-floor
TORCH_FLOOR := $(shell sed -n 's/^ *"torch>=\([0-9.]*\)".*/\1/p' pyproject.toml)
ifeq ($(TORCH),cpu)
  FLOOR_INDEX := --index-url $(TORCH_CPU_INDEX)
endif
test-floor:
	@test -x $(FLOOR_VENV)/bin/python || $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
	  $(FLOOR_INDEX) "torch==$(TORCH_FLOOR).*"
	$(FLOOR_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	$(FLOOR_VENV)/bin/python -c "import torch; print('torch', torch.__version__)"
	$(FLOOR_VENV)/bin/python -m pytest tests -m "not slow" --ignore=tests/browser -q \
	  -p no:cacheprovider
	$(FLOOR_VENV)/bin/python -m pytest tests/labs/test_dp_real.py tests/labs/test_ddp_real.py \
	  tests/runtime/test_fsdp_run.py tests/runtime/test_torchrun.py -q -p no:cacheprovider

test-browser: $(STAMP)
	bash .ci/install-browser
	$(BIN)/python -m pytest tests/browser -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) $(FLOOR_VENV) .pytest_cache .mypy_cache .ruff_cache artifacts
