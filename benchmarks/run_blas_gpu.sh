#!/usr/bin/env bash
# The BLAS benchmarks of the DPIA paper's §7 on a GPU machine, from the repository root, in two steps:
#
#   bash benchmarks/run_blas_gpu.sh fetch   # on a machine with network: the wheels fsmooth and pyopencl
#                                           # need, for the GPU machine's Python ($WHEEL_PYTHON, default
#                                           # 3.12), into .whl/ (git-ignored)
#   bash benchmarks/run_blas_gpu.sh         # on the GPU machine (no network needed), with .whl/ copied
#   bash benchmarks/run_blas_gpu.sh scan_filter
#                                           # the same set-up, then issue 14's scan and filter on OpenCL
#                                           # against torch/CuPy: 16 and 128 Mi floats, into $OUT, with
#                                           # $OUT/RESULTS.md (a copy of benchmarks/RESULTS.md) refreshed
#
# The second installs .whl/ into /tmp/site, registers the NVIDIA OpenCL ICD (and the system's PoCL
# for the CPU run), runs fsmooth against cuBLAS, then against numpy on PoCL's CPU device if one
# builds kernels there.  Results go to $OUT (default benchmarks/results): blas_gpu.json/.png,
# blas_cpu.json/.png.  The GPU machine needs numpy, matplotlib and PyTorch with CUDA installed.
set -u
PY="${PYTHON:-python3}"
OUT="${OUT:-benchmarks/results}"
WHEELS="pyopencl pytools platformdirs typing_extensions siphash24 sympy mpmath cffi pycparser"
if [ "${1:-}" = fetch ]; then
    # shellcheck disable=SC2086
    exec "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "${WHEEL_PYTHON:-3.12}" \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl $WHEELS
fi
if ! ls .whl/*.whl > /dev/null 2>&1; then
    echo "no wheels in .whl/: run 'bash benchmarks/run_blas_gpu.sh fetch' where there is network first" >&2
    exit 2
fi
mkdir -p "$OUT" /tmp/icd
"$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 2
echo libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
cp /etc/OpenCL/vendors/*.icd /tmp/icd/ 2>/dev/null
export OCL_ICD_VENDORS=/tmp/icd PYTHONPATH="/tmp/site:$PWD" FSMOOTH_CACHE_DIR=/tmp/fsmooth-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>/dev/null
if [ "${1:-}" = scan_filter ]; then
    cp benchmarks/RESULTS.md "$OUT/RESULTS.md"
    exec "$PY" -m benchmarks.scan_filter --opencl --sizes 16,128 --repeats 100 --out "$OUT" \
        --results-md "$OUT/RESULTS.md"
fi
"$PY" -m benchmarks.blas --device gpu --out "$OUT"; gpu=$?
# The CPU run must not cost the GPU results: bounded, and a missing PoCL is only reported (exit 3).
timeout 200 "$PY" -m benchmarks.blas --device cpu --out "$OUT"; cpu=$?
echo "blas: gpu run exit $gpu, cpu run exit $cpu"
exit $gpu
