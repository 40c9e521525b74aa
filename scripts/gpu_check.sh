#!/usr/bin/env bash
# The GPU check, one command, on a machine with one or two CUDA GPUs and no package index:
#
#   bash scripts/gpu_check.sh [--dry-run [--gpus N]] OUTDIR
#
# It installs the wheels of `make gpu-bundle` (build/gpu-bundle, or $GPU_BUNDLE) into a
# temporary folder, uses the machine's own torch, prints the versions, then runs, each step
# under `timeout` and all of them within $GPU_CHECK_BUDGET_S seconds (default 420 on one
# GPU, 540 on two or more):
#   1. scripts/record_gpu.py: every GPU number beside dpsim's prediction (at most 240 s);
#   1b. with 2 GPUs or more, record_gpu.py --gpus 2 (at most 120 s): the real
#      nn.DataParallel on 2 GPUs, NCCL DDP and FSDP2 on 2 ranks, each beside the simulated
#      step on 2 GPUs of the device (two launches of at most 40 s each, the DataParallel
#      step in-process, the start of Python and CUDA: ~100 s at worst);
#   2. pytest -m gpu (the tests that need a CUDA GPU; at most 180 s);
#   3. the notebooks with GPU cells (01, 03, 05, 06, 08, 09) under nbval (120 s each).
# The budget: 15 minutes of device time hold the machine's start (2 to 4 minutes) and one
# command of at most 600 s; 540 s, the last step's 10 s kill grace and the record's 40 s
# finish stay within it (tests/runtime/test_gpu_plan.py keeps these sums).
# A step that fails or runs out of time is recorded, and the next one runs (a step
# left when the budget is spent is recorded as out_of_time). It always writes
# OUTDIR/gpu_<device>.json (copy it to benchmarks/results/) and OUTDIR/gpu_check.log, and
# also OUTDIR/pytest_gpu.xml and OUTDIR/executed_notebooks.tar.gz when those steps ran.
#
# --dry-run (or GPU_CHECK_DRY_RUN=1): on a CPU, every step that needs no GPU runs (the
# bundle's check, the versions, record_gpu.py's predictions, pytest -m gpu's collection,
# whose tests skip) and the log and the JSON say what was skipped and why, with the time
# limit it has on a GPU. --gpus N (or GPU_CHECK_GPUS; default 1) emulates N GPUs: the plan,
# budget and steps of a machine with N GPUs, and record_gpu.py binds every library call
# each step would make there (`record_gpu.py --plan`).
# Exit status: 0 when every step passed or was skipped, 1 otherwise, 2 on a usage error.
set -u -o pipefail

DRY=${GPU_CHECK_DRY_RUN:-0}
GPUS=${GPU_CHECK_GPUS:-}
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
if [ "${1:-}" = "--gpus" ] && [ "$DRY" = 1 ]; then GPUS=${2:-}; shift 2 || true; fi
if [ $# -ne 1 ] || ! [[ "${GPUS:-1}" =~ ^[0-9]+$ ]]; then
  echo "usage: bash scripts/gpu_check.sh [--dry-run [--gpus N]] OUTDIR" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1" && OUT=$(cd "$1" && pwd) || exit 2
cd "$ROOT" || exit 2
LOG=$OUT/gpu_check.log

PY=${PYTHON:-python3}
BUNDLE=${GPU_BUNDLE:-$ROOT/build/gpu-bundle}
if [ "$DRY" != 1 ]; then  # the machine's own count (its torch needs no bundle)
  GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)" 2> /dev/null || echo 0)
fi
GPUS=${GPUS:-1}
BUDGET_1GPU=420
CAP_2GPU=120  # record_gpu.py --gpus 2 (see above); the budget grows by as much on 2 GPUs
FINISH_S=40  # the steps into the record, after the budget
BUDGET=${GPU_CHECK_BUDGET_S:-$([ "$GPUS" -ge 2 ] && echo $((BUDGET_1GPU + CAP_2GPU)) || echo $BUDGET_1GPU)}
NOTEBOOKS="01_single_device 03_data_parallel 05_ddp 06_fsdp 08_myths_lab 09_precision_and_memory"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
STEPS=$WORK/steps.tsv
SITE=$WORK/site
START=$(date +%s)
RUN_ID=gpu-check-$$  # nbval's executed copies: artifacts/executed/$RUN_ID/
: > "$STEPS"

note_step() {  # name status rc seconds note
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >> "$STEPS"
}

skip() {  # name reason
  echo "--- skipped $1: $2"
  note_step "$1" skipped "" 0 "$2"
}

run_step() {  # name cap_s command...: at most cap_s, and never past the budget
  local name=$1 cap=$2 left t0 rc status secs
  shift 2
  left=$(( BUDGET - ($(date +%s) - START) ))
  if [ "$left" -lt 15 ]; then
    echo "--- not run $name: out of the check's time budget (${BUDGET} s, GPU_CHECK_BUDGET_S)"
    note_step "$name" out_of_time "" 0 "not run: the check's budget (${BUDGET} s) was spent"
    return
  fi
  [ "$cap" -gt "$left" ] && cap=$left
  echo "=== $name (at most $cap s): $*"
  t0=$(date +%s)
  timeout --kill-after=10 "$cap" "$@"
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  case $rc in
    0) status=passed ;;
    124|137) status=timed_out ;;
    *) status=failed ;;
  esac
  echo "=== $name: $status (exit $rc, $secs s)"
  note_step "$name" "$status" "$rc" "$secs" "$*"
}

main() {
  echo "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $ROOT, results to $OUT," \
       "$GPUS GPUs$([ "$DRY" = 1 ] && echo ' (emulated)'), budget $BUDGET s$([ "$DRY" = 1 ] && echo ', DRY RUN')"

  # 1. the bundle
  if ! ls "$BUNDLE"/*.whl > /dev/null 2>&1; then
    if [ "$DRY" = 1 ]; then
      skip bundle "no wheels in $BUNDLE (make gpu-bundle); the dry run uses this environment's packages"
    else
      echo "gpu_check: no wheels in $BUNDLE: run make gpu-bundle, and carry build/gpu-bundle"
      note_step bundle failed "" 0 "no wheels in $BUNDLE"
    fi
  elif [ "$DRY" = 1 ]; then
    run_step bundle-contents 60 "$PY" scripts/gpu_bundle.py check --dest "$BUNDLE"
    skip bundle-install "the wheels are for CPython 3.12 on the GPU machine; the dry run uses this environment's packages"
  else
    run_step bundle-install 120 "$PY" -m pip install --quiet --disable-pip-version-check \
      --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$BUNDLE"/*.whl
  fi
  local site=""
  [ -d "$SITE" ] && site=":$SITE"
  export PYTHONPATH="$ROOT$site${PYTHONPATH:+:$PYTHONPATH}"
  echo "gpu_check: PYTHONPATH=$PYTHONPATH"
  export PYTHONUNBUFFERED=1 JUPYTER_PLATFORM_DIRS=1 MPLBACKEND=Agg

  # 2. the versions (and whether torch sees a GPU)
  run_step versions 60 "$PY" - <<'EOF'
import importlib, platform, shutil, subprocess, sys
import torch
print("python", sys.version.split()[0], platform.platform())
print("torch", torch.__version__, "cuda", torch.version.cuda,
      "cuda available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name(0), "count", torch.cuda.device_count(),
          "nccl", torch.cuda.nccl.version() if torch.distributed.is_nccl_available() else None)
if shutil.which("nvidia-smi"):
    subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                    "--format=csv"], check=False)
bad = []
for name in ("numpy", "pytest", "plotly", "ipywidgets", "IPython", "ipykernel", "nbval",
             "nbformat", "nbclient", "jupyter_client", "dill", "multiprocess", "dpsim"):
    try:
        module = importlib.import_module(name)
        print(f"{name:<15} {getattr(module, '__version__', '?'):<12} {module.__file__}")
    except Exception as exc:
        bad.append(name)
        print(f"{name:<15} MISSING: {type(exc).__name__}: {exc}")
sys.exit(1 if bad else 0)
EOF
  if [ "$DRY" != 1 ] && ! "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "gpu_check: torch sees no CUDA GPU: the GPU steps run as in --dry-run"
    note_step gpu failed 1 0 "torch sees no CUDA GPU; the GPU steps ran as in --dry-run"
    DRY=1
  fi

  # 3. the record: every GPU number beside its prediction
  # (a dry run: the predictions and the plan, under the limits a GPU run has)
  if [ "$DRY" = 1 ]; then
    run_step record 240 "$PY" scripts/record_gpu.py --dry-run --out "$OUT"
  else
    run_step record 240 "$PY" scripts/record_gpu.py --out "$OUT"
  fi

  # 3b. on 2 GPUs: DataParallel on 2 GPUs, DDP and FSDP2 on 2 NCCL ranks, into the record
  if [ "$GPUS" -lt 2 ]; then
    skip record-2gpu "needs 2 GPUs; this machine has $GPUS (on 2: at most $CAP_2GPU s)"
  elif [ "$DRY" = 1 ]; then
    run_step record-2gpu "$CAP_2GPU" "$PY" scripts/record_gpu.py --dry-run --gpus 2 --out "$OUT"
  else
    run_step record-2gpu "$CAP_2GPU" "$PY" scripts/record_gpu.py --gpus 2 --out "$OUT"
  fi

  # 4. pytest -m gpu (record_gpu.py's own whole-record test: step 3 ran the record)
  # GPU_CHECK_PYTEST_PATHS: where pytest looks (default tests; the suite's own dry run
  # narrows it to keep CI short)
  # shellcheck disable=SC2086
  run_step pytest-gpu 180 "$PY" -m pytest ${GPU_CHECK_PYTEST_PATHS:-tests} -m gpu \
    --ignore=tests/browser -p no:cacheprovider \
    -q -rs --junitxml="$OUT/pytest_gpu.xml" \
    --deselect tests/runtime/test_record_gpu.py::test_record_writes_one_json_with_the_machine

  # 5. the notebooks' GPU cells under nbval
  export PYTEST_XDIST_TESTRUNUID=$RUN_ID
  for nb in $NOTEBOOKS; do
    if [ "$DRY" = 1 ]; then
      skip "nbval-$nb" "its GPU cells need a CUDA GPU (its CPU path runs under nbval in the suite; on a GPU: at most 120 s)"
    else
      run_step "nbval-$nb" 120 "$PY" -m pytest "notebooks/$nb.ipynb" --nbval-lax \
        --nbval-current-env -p no:cacheprovider -q
    fi
  done
  unset PYTEST_XDIST_TESTRUNUID
  if [ -d "artifacts/executed/$RUN_ID" ]; then
    tar -czf "$OUT/executed_notebooks.tar.gz" -C artifacts/executed "$RUN_ID"
  fi

  # 6. the steps into the record (a record with the machine alone if step 3 wrote none)
  timeout "$FINISH_S" "$PY" scripts/record_gpu.py --attach-steps "$STEPS" --out "$OUT" \
    || echo "gpu_check: could not add the steps to the record"
  if ! ls "$OUT"/gpu_*.json > /dev/null 2>&1; then
    printf '{"benchmark": "gpu", "error": "no record written: see gpu_check.log"}\n' \
      > "$OUT/gpu_unknown.json"
  fi

  echo "gpu_check: steps (name, status, exit, seconds, note):"
  cat "$STEPS"
  echo "gpu_check: skipped:"
  awk -F'\t' '$2 == "skipped" {print "  " $1 ": " $5}' "$STEPS"
  echo "gpu_check: wrote $(ls "$OUT"/gpu_*.json)$([ "$DRY" = 1 ] && echo " (a dry run: keep nothing)" || echo " (copy it to benchmarks/results/)") and $LOG," \
       "$(( $(date +%s) - START )) s in all"
  ! awk -F'\t' '$2 != "passed" && $2 != "skipped" {found = 1} END {exit !found}' "$STEPS"
}

main 2>&1 | tee "$LOG"
status=$?
rm -rf "$WORK"
exit "$status"
