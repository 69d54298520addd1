#!/usr/bin/env bash
# Every check that needs an NVIDIA GPU, in one go, from the repository root of a checkout with
# mannlab installed with its GPU and test extras (pip install -e ".[gpu,test]" over a CUDA build
# of torch):
#
#   benchmarks/gpu_check.sh [OUT_DIR]        (default: gpu-check/)
#
#   1. the machine: nvidia-smi, torch, CUDA, Triton versions          -> machine.txt
#   2. the Triton kernels' tests on the GPU (ARMIN, NTM, D-NTM, TARDIS, DNC: tests/ops) and
#      the device tests                                                -> gpu-tests.log
#   3. benchmarks/bench_gpu.py (batch 32, 512, 4096; every model, its Triton kernels forced:
#      none is GPU-checked at present, ARMIN's and the NTM's changed
#      since their one GPU run)                                        -> bench_gpu.log, .json
#   4. the README's quick start with the default device, timed         -> quickstart.log
#   5. the whole test suite (on a GPU machine every test must pass)    -> suite.log
#
# Each step runs even when an earlier one fails; the exit status is the first failure's. Where a
# model's kernels pass steps 2 and 3, set GPU_CHECKED = True in its triton_kernels.py.
# BENCH_ARGS adds options to bench_gpu.py (e.g. "--models armin,ntm"); QUICKSTART_TIMEOUT and
# SUITE_TIMEOUT (seconds, defaults 600 and 1800) bound steps 4 and 5.
set -uo pipefail
out=${1:-gpu-check}
mkdir -p "$out"
status=0
step() {  # step NAME LOG COMMAND...: run, tee to OUT/LOG, remember the first failure
    local name=$1 log=$2
    shift 2
    echo "== $name" | tee "$out/$log"
    local start=$SECONDS
    "$@" 2>&1 | tee -a "$out/$log"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc after $((SECONDS - start)) s" | tee -a "$out/$log"
    [[ $status -eq 0 && $rc -ne 0 ]] && status=$rc
    return 0
}
export PYTHONUNBUFFERED=1

step machine machine.txt bash -c 'nvidia-smi; python3 -c "
import torch, platform
print(\"python\", platform.python_version(), \"torch\", torch.__version__, \"cuda\", torch.version.cuda)
print(\"gpu\", torch.cuda.get_device_name() if torch.cuda.is_available() else None)
try:
    import triton; print(\"triton\", triton.__version__)
except ImportError as e:
    print(\"triton missing:\", e)
"'
step "GPU tests" gpu-tests.log python3 -m pytest -q -n 0 -p no:cacheprovider \
    tests/ops tests/training/test_device_policy.py tests/models/test_model_devices.py tests/training/test_training_devices.py
# shellcheck disable=SC2086  # BENCH_ARGS is a list of options
step "bench_gpu" bench_gpu.log python3 benchmarks/bench_gpu.py --json "$out/bench_gpu.json" ${BENCH_ARGS:-}
step "quick start (default device)" quickstart.log \
    timeout "${QUICKSTART_TIMEOUT:-600}" mannlab train --model ntm --task copy --run-dir "$(mktemp -d)/quickstart" --force --no-progress
step "whole suite" suite.log timeout "${SUITE_TIMEOUT:-1800}" python3 -m pytest -q -p no:cacheprovider
exit $status
