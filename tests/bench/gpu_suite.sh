#!/usr/bin/env bash
# The GPU suite, one command on a CUDA machine (written for an H200; well under 5 minutes):
#
#   bash tests/bench/gpu_suite.sh
#
# 1. the kernel tests and the static-step tests (CUDA graph capture), for real on CUDA, plus
#    the layer test (the engine and kernels must import without the server's dependencies,
#    which that machine lacks);
# 2. each kernel against its torch counterpart at Open-dCoder-0.5B and DiffuCoder-7B shapes
#    (tests/bench/bench_kernels.py);
# 3. end-to-end engine latency, `bench_gpu_engine.py --device cuda --out
#    DIR/<date>-engine-<gpu>.json`: diffusion with the captured step and with the dynamic one,
#    autoregressive for the ratio; the JSON plus its markdown table beside it as .md.
# Results (JSON + markdown with date, commit and GPU) go to tests/bench/results/, or to
# $RESULTS when set. Needs python3 with torch and triton; redraft need not be installed.
# Exits non-zero when any step fails; the later steps run anyway.

set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
OUTDIR=${RESULTS:-tests/bench/results}
BUDGET=${BUDGET_S:-270}  # seconds for the whole suite; each step gets what is left
mkdir -p "$OUTDIR"
unset TRITON_INTERPRET  # compile the kernels for the GPU, not the interpreter
export PYTHONUNBUFFERED=1

# Make `redraft.*` importable from this checkout without installing it: a package folder
# of links to the source folders, as pyproject's package-dir mapping does.
if ! "$PY" -c "import redraft.kernels, redraft.engine" 2>/dev/null; then
    SHIM=$(mktemp -d)
    mkdir -p "$SHIM/redraft"
    for p in engine kernels; do ln -s "$PWD/$p" "$SHIM/redraft/$p"; done
    export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"
fi

status=0
step() {  # step NAME CAP_SECONDS COMMAND...
    local name=$1 cap=$2
    shift 2
    local left=$((BUDGET - SECONDS))
    ((left < cap)) && cap=$left
    if ((cap < 10)); then
        echo "== $name: skipped, the suite's time is spent"
        status=1
        return
    fi
    echo "== $name (at most ${cap}s)"
    local t0=$SECONDS
    timeout "$cap" "$@"
    local rc=$?
    echo "== $name: exit $rc after $((SECONDS - t0))s"
    ((rc != 0)) && status=1
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader 2>/dev/null \
    || echo "nvidia-smi not available"
"$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__,
      'cuda', torch.cuda.is_available() and torch.cuda.get_device_name())"

XDIST=()
"$PY" -c "import xdist" 2>/dev/null && XDIST=(-n 8)  # compiling dominates: spread it over cores
step "kernel tests" 90 "$PY" -m pytest tests/kernels tests/engine/test_step.py tests/test_layers.py -q -p no:cacheprovider \
    "${XDIST[@]}"
step "kernel benchmark" 90 "$PY" tests/bench/bench_kernels.py --device cuda --out "$OUTDIR"
GPU=$("$PY" -c "import re, torch; print(re.sub('[^a-z0-9]+', '-', torch.cuda.get_device_name().lower()))" \
    2>/dev/null || echo unknown)
ENGINE_OUT="$OUTDIR/$(date +%F)-engine-$GPU"
step "engine benchmark" 150 bash -c "set -o pipefail; \"\$@\" | tee '$ENGINE_OUT.md'" _ \
    "$PY" tests/bench/bench_gpu_engine.py --device cuda --out "$ENGINE_OUT.json"
echo "== suite: $([[ $status == 0 ]] && echo passed || echo FAILED) in ${SECONDS}s; results in $OUTDIR"
exit $status
