#!/usr/bin/env bash
# Every check that needs an NVIDIA GPU, in one go, from the repository root of a checkout with
# mannlab installed with its GPU and test extras (pip install -e ".[gpu,test]" over a CUDA build
# of torch):
#
#   benchmarks/gpu_check.sh [OUT_DIR]        (default: gpu-check/)
#
#   machine    nvidia-smi, torch, CUDA, Triton versions                       -> machine.txt
#   compile    every bench_gpu.py model's Triton kernels compiled at once, one process per
#              model (Triton compiles each kernel on one core, minutes for the larger ones;
#              its disk cache then serves the steps below)                    -> compile.log
#   tests      the Triton kernels' tests on the GPU (ARMIN, NTM, D-NTM, TARDIS, DNC:
#              tests/ops -k triton) and the device tests, in GPU_TEST_WORKERS processes
#              (default 8), without the numba warm-up (MANNLAB_TEST_WARM_UP=0)  -> gpu-tests.log
#   bench      benchmarks/bench_gpu.py (batch 32, 512, 4096; every model, its Triton kernels
#              forced: none is GPU-checked at present)                        -> bench_gpu.log, .json
#   quickstart the README's quick start with the default device, timed         -> quickstart.log
#   suite      the whole test suite (on a GPU machine every test must pass)   -> suite.log
#
# STEPS picks and orders them (default: all, as listed), e.g. STEPS="machine compile tests
# bench" for a short session. Each step runs even when an earlier one fails; the exit status is
# the first failure's. Where a model's kernels pass tests and bench, set GPU_CHECKED = True in
# its triton_kernels.py. BENCH_ARGS adds options to bench_gpu.py (e.g. "--models armin,ntm");
# COMPILE_TIMEOUT, TESTS_TIMEOUT, BENCH_TIMEOUT, QUICKSTART_TIMEOUT and SUITE_TIMEOUT (seconds;
# defaults 600, 900, 900, 600, 1800) bound the steps.
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

machine() {
    step machine machine.txt bash -c 'nvidia-smi; python3 -c "
import torch, platform
print(\"python\", platform.python_version(), \"torch\", torch.__version__, \"cuda\", torch.version.cuda)
print(\"gpu\", torch.cuda.get_device_name() if torch.cuda.is_available() else None)
try:
    import triton; print(\"triton\", triton.__version__)
except ImportError as e:
    print(\"triton missing:\", e)
"'
}
compile_kernels() {  # one training step per model at batch 32, all models at once
    step compile compile.log timeout "${COMPILE_TIMEOUT:-600}" bash -c '
        pids=()
        for model in $(python3 -c "import sys; sys.path.insert(0, \"benchmarks\"); import bench_gpu; print(*bench_gpu.MODELS)"); do
            python3 benchmarks/bench_gpu.py --models "$model" --batch-sizes 32 --warmup 1 --repeats 1 \
                --no-tensor-path > "$1/compile-$model.log" 2>&1 &
            pids+=($!)
        done
        rc=0
        for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
        tail -n 3 "$1"/compile-*.log
        exit $rc' _ "$out"
}
tests() {
    step "GPU tests" gpu-tests.log env MANNLAB_TEST_WARM_UP=0 timeout "${TESTS_TIMEOUT:-900}" \
        python3 -m pytest -q -n "${GPU_TEST_WORKERS:-8}" -p no:cacheprovider -k "triton or device" \
        tests/ops tests/training/test_device_policy.py tests/models/test_model_devices.py \
        tests/training/test_training_devices.py
}
bench() {
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of options
    step bench_gpu bench_gpu.log timeout "${BENCH_TIMEOUT:-900}" \
        python3 benchmarks/bench_gpu.py --json "$out/bench_gpu.json" ${BENCH_ARGS:-}
}
quickstart() {
    step "quick start (default device)" quickstart.log timeout "${QUICKSTART_TIMEOUT:-600}" \
        mannlab train --model ntm --task copy --run-dir "$(mktemp -d)/quickstart" --force --no-progress
}
suite() {
    step "whole suite" suite.log timeout "${SUITE_TIMEOUT:-1800}" python3 -m pytest -q -p no:cacheprovider
}

steps=${STEPS:-machine compile tests bench quickstart suite}
for name in $steps; do
    case $name in
        machine | compile | tests | bench | quickstart | suite) ;;
        *)
            echo "gpu_check.sh: unknown step '$name' (steps: machine compile tests bench quickstart suite)" >&2
            exit 2
            ;;
    esac
done
for name in $steps; do
    if [[ $name == compile ]]; then compile_kernels; else "$name"; fi
done
exit $status
